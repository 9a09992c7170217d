"""Configuration: config.yaml (+ config files, + KEY=VALUE overrides) -> validated dict ->
one effective config per stage.

The Snakefile (rules/common.smk) and the command line both validate the merged config and
resolve its "auto" values with ``resolve``, so ``snakemake`` and ``python -m inferlab stage``
accept and refuse exactly the same configs. A section's ``cpu:`` or ``cuda:`` block, for
the device found, is merged over its shared keys.

A stage's *effective config* (the seed, the device and its sections, resolved for the
device) is the one description of what a stage computes: the rule's params (its rerun
trigger), the provenance's ``config_sha256`` and what ``inferlab adopt`` compares. The
*grid* names what was computed (``resolve_grid``): results of any grid but the book's go
to ``results/{machine}@{grid}/``, never over the book's.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from inferlab.core import layout, validation
from inferlab.core.files import sha256_bytes
from inferlab.core.pipeline import STAGES, stage
from inferlab.measurement.environment import default_device, machine_id
from inferlab.workflow.cpu_guard import refuse_capability_beyond_cpu

if TYPE_CHECKING:
    import jsonschema

SCHEMA_PATH = layout.schema_path("config.schema.json")
MAX_CONFIG_BYTES = 1 << 20   # a config file or --set value: the book's config.yaml is ~20 kB
MAX_ERRORS, MAX_ERROR_CHARS = 20, 300  # an error names at most 20 keys, each line cut short
MAX_VALUES = 100_000  # values in one config file, aliases expanded
DEVICE_BLOCKS = ("cpu", "cuda")
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster where installed


def deep_merge(base: dict, update: dict) -> dict:
    """``update`` merged into a copy of ``base``, recursively (as Snakemake merges configs)."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class _Loader(_Base):
    """yaml's safe loader that refuses a key given twice in one mapping (the plain loader
    keeps the last silently: ``seed: 0`` then ``seed: 7`` ran with 7)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if not isinstance(key, str | int | float | bool):
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice: line {seen[key]} and line "
                        f"{line}; keep one")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's integers (what Snakemake's --config reads), not 1.1's: "010" is 10, not octal
# 8, and "1:30" (base 60, 90) or "1_000" are no integers
_INT_TAG = "tag:yaml.org,2002:int"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _INT_TAG]
    for first, resolvers in _Base.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(_INT_TAG, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_Loader.add_constructor(_INT_TAG, lambda loader, node: int(loader.construct_scalar(node), 10))


def _check_expansion(data: Any, where: str, most: int = MAX_VALUES) -> None:
    """A YAML alias (``*name``) repeats a value without repeating its text: eight levels
    of ten make 10**9 values from 1 kB, which the schema check would walk for minutes."""
    count, stack = 0, [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > most:
            raise ValueError(f"{where} expands to more than {most:,} values (YAML aliases "
                             "repeating one another?); a config is a few hundred")
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item


def _short(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def _check_size(text: str, where: str) -> None:
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} is {size / 1e6:.1f} MB: more than the "
                         f"{MAX_CONFIG_BYTES >> 20} MB a config file may be; a grid that "
                         "large would not run within any stage's time budget")


def _yaml(text: str, where: str) -> Any:
    _check_size(text, where)
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
    except RecursionError:
        raise ValueError(f"{where} is nested too deeply to be a config") from None
    except yaml.YAMLError as exc:
        if "appears twice" in str(getattr(exc, "problem", "")):
            raise ValueError(f"{where}: {exc.problem}") from None
        raise ValueError(f"{where} is not valid YAML: {_short(' '.join(str(exc).split()))}") \
            from None
    _check_expansion(data, where)
    return data


def parse_override(text: str) -> dict:
    """``"correctness.cpu.lengths=[512, 1024]"`` -> ``{"correctness": {"cpu": {"lengths":
    [512, 1024]}}}``, the value parsed as YAML, like Snakemake's ``--config KEY=VALUE``."""
    _check_size(text, f"override {_short(text, 60)!r}")
    key, sep, value = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ValueError(f"override {text!r} is not KEY=VALUE with a dotted KEY "
                         "(e.g. correctness.cpu.lengths=[512,1024])")
    nested: Any = _yaml(value, f"the value of override {text!r}") if value.strip() else ""
    for part in reversed(parts):
        nested = {part: nested}
    return nested


def read_yaml(path: Path | str) -> dict:
    """A config file's mapping; a ValueError naming the file when it is none."""
    path = Path(path)
    where = f"config file {str(path)!r}"
    if not path.exists():
        raise ValueError(f"{where} does not exist")
    if not path.is_file():
        raise ValueError(f"{where} is not a regular file (a folder, FIFO or device): give the "
                         "YAML file itself")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start}); save it as UTF-8") from None
    data = _yaml(text, where) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a mapping of keys, not {type(data).__name__}")
    return data


def load_config(configfiles=(), overrides=(), base: Path | str | None = None) -> dict:
    """config.yaml, then each config file, then each KEY=VALUE override; validated."""
    raw = read_yaml(layout.CONFIG_FILE if base is None else base)
    for path in configfiles:
        raw = deep_merge(raw, read_yaml(path))
    for text in overrides:
        raw = deep_merge(raw, parse_override(text))
    return validate_config(raw)


def _key_path(parts) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def _error_lines(error: jsonschema.ValidationError) -> list[str]:
    """'config key <path>: <problem>'; an unknown key is named itself, not its parent."""
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {}))
        return [f"config key {_key_path([*error.absolute_path, extra])}: unknown key "
                f"(expected one of {known})"
                for extra in sorted(set(error.instance) - set(known))]
    return [f"config key {_key_path(error.absolute_path)}: {_short(error.message)}"]


def validate_config(raw: dict) -> dict:
    """``raw`` if it matches the schema (strictly: ``validation.validator``) and the keys
    that bound one another agree; else a ValueError naming each key and value."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    errors = sorted(validation.validator(schema, strict=True).iter_errors(raw),
                    key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [line for e in errors for line in _error_lines(e)]
        more = len(lines) - MAX_ERRORS
        lines = lines[:MAX_ERRORS] + ([f"... and {more} more"] if more > 0 else [])
        raise ValueError("invalid config (schemas/config.schema.json):\n  " + "\n  ".join(lines))
    _check_orders(raw)
    _check_sizes(raw)
    return raw


def _check_orders(raw: dict) -> None:
    """Keys that bound one another, which the schema (checked first: every key is there)
    cannot relate: a matmul_min_n above matmul_max_n would time min_n whatever memory max_n
    bounds; min_rounds above max_rounds and a gqa_groups that does not divide the map's
    heads would fail mid-run."""
    probe = raw["probe"]
    pairs = [("timing", raw["timing"], "min_rounds", "max_rounds")]
    pairs += [(f"probe.{d}", probe[d], "matmul_min_n", "matmul_max_n") for d in DEVICE_BLOCKS]
    for where, block, low, high in pairs:
        if block[low] > block[high]:
            raise ValueError(f"invalid config: {where}.{low}={block[low]} is above "
                             f"{where}.{high}={block[high]}; {low} must be at most {high}")
    groups, heads = probe["map"]["gqa_groups"], probe["map"]["heads"]
    if heads % groups:
        raise ValueError(f"invalid config: probe.map.gqa_groups={groups} does not divide "
                         f"probe.map.heads={heads} (grouped key/value heads)")


def _check_sizes(raw: dict) -> None:
    """One entry per dtype and length in a prefill ``sizes`` list: the stage keys its
    results by them, so a second entry of the same point (another causal list, a duplicate)
    would replace the first's rows."""
    prefill = raw["prefill"]
    for name, block in [("prefill", prefill)] + [(f"prefill.{d}", prefill[d])
                                                 for d in DEVICE_BLOCKS]:
        seen: dict = {}
        for i, entry in enumerate(block.get("sizes", [])):
            for T in entry["T"]:
                point = (entry["dtype"], T)
                if point in seen:
                    raise ValueError(
                        f"invalid config: {name}.sizes[{seen[point]}] and [{i}] both hold "
                        f"{point[0]} T={T}: one entry per dtype and length (list both masks "
                        "in its causal:)")
                seen[point] = i


def resolve_device(raw: dict, check: bool = True) -> str:
    """The config's device, "auto" resolved to the one here. ``check=False``: a stage that
    runs nothing on the device takes a named device as it is, so another machine's
    evidence (a GPU's, merged here) can be derived on this host."""
    refuse_capability_beyond_cpu()
    if raw["device"] == "auto":
        return default_device()
    if raw["device"] == "cuda" and check:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("config key device: 'cuda' but torch.cuda.is_available() is "
                             "False here; use device: cpu or auto")
    return raw["device"]


def resolve_machine(raw: dict, device: str, machine: str | None = None) -> str:
    """``machine`` (a command line's --machine) if given, else config["machine"], else the
    id detected from the hardware when that is "auto"."""
    if machine is None:
        machine = raw["machine"]
        if machine == "auto":
            machine = machine_id(device)
    return layout.check_machine(machine)


def available_cpus() -> int:
    """The CPUs this process may run on (a container or taskset may allow fewer)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_threads(raw: dict, cores: int | None = None) -> int:
    """torch's intra-op threads: config["threads"], or when "auto" the cores Snakemake
    gave the job (``cores``), or else every CPU this process may use."""
    if raw["threads"] != "auto":
        return raw["threads"]
    return max(1, min(cores, available_cpus())) if cores else available_cpus()


def device_block(section: dict, device: str) -> dict:
    """A config section for ``device``: its ``cpu:``/``cuda:`` block over its shared keys."""
    shared = {k: v for k, v in section.items() if k not in DEVICE_BLOCKS}
    return {**shared, **section.get(device, {})}


def effective_config(raw: dict, stage_name: str, device: str) -> dict:
    """What stage ``stage_name`` computes from: seed, device and its sections for the device."""
    declared = stage(stage_name)
    return json.loads(json.dumps(
        {"device": device, "seed": raw["seed"],
         **{s: device_block(raw[s], device) for s in declared.sections}}))


def grid_hash(raw: dict, device: str) -> str:
    """sha256 of every stage's effective config: what the whole grid computes."""
    configs = {name: effective_config(raw, name, device) for name in STAGES}
    return sha256_bytes(json.dumps(configs, sort_keys=True).encode())


def resolve_grid(raw: dict, device: str, default: dict | None = None) -> str | None:
    """None when ``raw`` computes the book grid (``default``: config.yaml alone), else a
    name only this grid has: its ``grid`` name when it computes what that name's profile
    does, else that name or ``custom`` with ``-<8 hex of the grid hash>``, so that three
    configs naming one grid never share its results key."""
    default = load_config() if default is None else default
    here = grid_hash(raw, device)
    if here == grid_hash(default, device):
        return None
    name = raw.get("grid")
    if not name:
        return f"custom-{here[:8]}"
    layout.check_grid(name)
    if grid_hash(named_profile(name, default), device) == here:
        return name
    return layout.check_grid(f"{name[:31]}-{here[:8]}")


def named_profile(grid: str, default: dict) -> dict:
    """config.yaml (``default``) with ``profiles/<grid>.yaml`` over it, when that profile
    names ``grid``; else ``default`` (a grid no profile names has no fixed contents)."""
    path = layout.profile_path(grid)
    if not path.is_file():
        return default
    profile = read_yaml(path)
    return deep_merge(default, profile) if profile.get("grid") == grid else default


@dataclass(frozen=True)
class Config:
    """A validated config with its "auto" values resolved."""

    machine: str
    grid: str | None
    device: str
    seed: int
    raw: dict[str, Any] = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        """The results key: ``machine``, or ``machine@grid`` off the book grid."""
        return layout.results_key(self.machine, self.grid)

    def effective(self, stage_name: str) -> dict:
        return effective_config(self.raw, stage_name, self.device)


def resolve(raw: dict, machine: str | None = None, check_device: bool = True) -> Config:
    """Validate ``raw`` and resolve its "auto" values; ``machine`` overrides config["machine"].
    ``check_device=False`` (a stage that runs nothing on the device) takes the named device
    as it is, but only for a machine named here or in the config: detecting one needs it."""
    raw = validate_config(raw)
    named = machine is not None or raw["machine"] != "auto"
    device = resolve_device(raw, check_device or not named)
    return Config(machine=resolve_machine(raw, device, machine), grid=resolve_grid(raw, device),
                  device=device, seed=raw["seed"], raw=raw)
