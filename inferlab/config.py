"""Configuration: config.yaml (+ config files, + KEY=VALUE overrides) -> validated dict ->
typed, frozen parameters per stage.

Configuration flows one way. Snakemake validates the merged config against
``schemas/config.schema.json`` with ``snakemake.utils.validate``; this module validates
against the same file, so ``python -m inferlab stage ...`` without Snakemake accepts and
refuses exactly the same configs. "auto" values (machine, device, threads) are resolved
here, once, and the stage gets the ``cpu:`` or ``cuda:`` size block for the device found.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from inferlab.layout import check_machine, check_stage

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "schemas" / "config.schema.json"
DEFAULT_CONFIG = REPO_ROOT / "config.yaml"


# --------------------------------------------------------------------------- typed params


@dataclass(frozen=True)
class TimingParams:
    warmup: int
    rounds: int
    timings_per_round: int
    noisy_threshold: float
    min_run_ms: float


@dataclass(frozen=True)
class ProbeParams:
    tokens: int
    heads: int
    d: int
    copy_mib: int
    matmul_size: int
    dtypes: tuple[str, ...]      # the prefill dtypes: availability is probed for these
    causal: tuple[bool, ...]
    timing: TimingParams


@dataclass(frozen=True)
class CorrectnessParams:
    heads: int
    d: int
    lengths: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]   # (block_q, block_k)
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    score_scales: tuple[float, ...]
    splits: tuple[int, ...]
    splitkv_cache_len: int
    pair_model_T: int
    pair_model_blocks: tuple[int, ...]


@dataclass(frozen=True)
class PrefillParams:
    batch: int
    heads: int
    d: int
    lengths: tuple[int, ...]
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    implementations: tuple[str, ...]
    backends: tuple[str, ...]
    blocks: tuple[int, ...]
    memory_cap_gib: float | None
    timing: TimingParams


@dataclass(frozen=True)
class DecodeParams:
    heads: int
    d: int
    cache_lens: tuple[int, ...]
    batches: tuple[int, ...]
    dtypes: tuple[str, ...]
    splits: tuple[int, ...]
    backends: tuple[str, ...]
    timing: TimingParams


@dataclass(frozen=True)
class TrafficParams:
    block_q_model: int
    model_lengths: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClaimsParams:
    """The claims stage is configured by claims.yaml, not by config.yaml."""


@dataclass(frozen=True)
class Config:
    """A validated config with its "auto" values resolved."""

    machine: str
    device: str
    threads: int
    seed: int
    raw: dict[str, Any] = field(compare=False, repr=False)

    def stage_params(self, stage: str):
        return stage_params(self, stage)


# --------------------------------------------------------------------------- loading


def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def deep_merge(base: dict, update: dict) -> dict:
    """``update`` merged into a copy of ``base``, recursively (as Snakemake merges configs)."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def parse_override(text: str) -> dict:
    """``"prefill.cpu.lengths=[512, 1024]"`` -> ``{"prefill": {"cpu": {"lengths": [512, 1024]}}}``.

    The value is parsed as YAML, like Snakemake's ``--config KEY=VALUE``.
    """
    key, sep, value = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ValueError(f"override {text!r} is not KEY=VALUE with a dotted KEY "
                         "(e.g. prefill.cpu.lengths=[512,1024])")
    nested: Any = yaml.safe_load(value) if value.strip() else ""
    for part in reversed(parts):
        nested = {part: nested}
    return nested


def _read_yaml(path: Path | str) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r} must hold a mapping of keys, not "
                         f"{type(data).__name__}")
    return data


def load_config(configfiles=(), overrides=(), base: Path | str = DEFAULT_CONFIG) -> dict:
    """config.yaml, then each config file, then each KEY=VALUE override; validated."""
    raw = _read_yaml(base)
    for path in configfiles:
        raw = deep_merge(raw, _read_yaml(path))
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
    return [f"config key {_key_path(error.absolute_path)}: {error.message}"]


def validate_config(raw: dict) -> dict:
    """Return ``raw`` if it matches the schema; else ValueError naming the key and value."""
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [line for e in errors for line in _error_lines(e)]
        raise ValueError("invalid config (schemas/config.schema.json):\n  " + "\n  ".join(lines))
    return raw


# --------------------------------------------------------------------------- resolving


def resolve_device(raw: dict) -> str:
    if raw["device"] != "auto":
        if raw["device"] == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("config key device: 'cuda' but torch.cuda.is_available() is "
                                 "False here; use device: cpu or auto")
        return raw["device"]
    from inferlab.environment import default_device

    return default_device()


def resolve_machine(raw: dict, device: str | None = None) -> str:
    """The machine id: config["machine"], or detected from the device when "auto"."""
    if raw["machine"] != "auto":
        return check_machine(raw["machine"])
    from inferlab.environment import machine_id

    return check_machine(machine_id(device or resolve_device(raw)))


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve(raw: dict, machine: str | None = None) -> Config:
    """Validate ``raw`` and resolve its "auto" values; ``machine`` overrides config["machine"]."""
    raw = validate_config(raw)
    device = resolve_device(raw)
    threads = available_cpus() if raw["threads"] == "auto" else raw["threads"]
    machine = check_machine(machine) if machine else resolve_machine(raw, device)
    return Config(machine=machine, device=device, threads=threads, seed=raw["seed"], raw=raw)


# --------------------------------------------------------------------------- per stage


def _tuples(block: dict) -> dict:
    """Lists -> tuples (nested too), so the params are hashable and frozen."""
    return {k: tuple(tuple(x) if isinstance(x, list) else x for x in v)
            if isinstance(v, list) else v for k, v in block.items()}


def _device_block(raw: dict, stage: str, device: str) -> dict:
    section = raw[stage]
    shared = {k: v for k, v in section.items() if k not in ("cpu", "cuda")}
    return _tuples({**shared, **section[device]})


def stage_params(config: Config, stage: str):
    """The typed, frozen parameters of ``stage`` for ``config``'s device."""
    check_stage(stage)
    raw, device = config.raw, config.device
    timing = TimingParams(**raw["timing"])
    if stage == "probe":
        prefill = _device_block(raw, "prefill", device)
        return ProbeParams(**_device_block(raw, "probe", device), dtypes=prefill["dtypes"],
                           causal=prefill["causal"], timing=timing)
    if stage == "correctness":
        block = _device_block(raw, "correctness", device)
        model = block.pop("pair_model")
        return CorrectnessParams(**block, pair_model_T=model["T"],
                                 pair_model_blocks=tuple(model["blocks"]))
    if stage == "prefill":
        return PrefillParams(**_device_block(raw, "prefill", device), timing=timing)
    if stage == "decode":
        return DecodeParams(**_device_block(raw, "decode", device), timing=timing)
    if stage == "traffic":
        traffic = raw["traffic"]
        return TrafficParams(block_q_model=traffic["block_q_model"],
                             model_lengths=tuple(traffic["model_lengths"]))
    return ClaimsParams()


def params_dict(params) -> dict:
    """JSON-ready form of a params dataclass (for the provenance's effective config)."""
    return json.loads(json.dumps(asdict(params)))
