"""inferlab.workflow.config: loading, merging, schema validation, "auto" resolution, the effective
config per stage, grids; and each stage's typed params built from it."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from inferlab.core import layout, validation
from inferlab.core.pipeline import STAGES
from inferlab.workflow import config as cfg
from inferlab.workflow.config import load_config, resolve_grid
from tests.pipeline_repo import copy_repo

REPO = layout.REPO_ROOT

# (overrides, what the error must say): each one kind of bad config, refused naming its key
REFUSED = [
    (["bogus=1"], "config key bogus:"),                                 # unknown key, top level
    (["prefill.cpu.bogus=1"], "config key prefill.cpu.bogus:"),         # unknown key, nested
    (["seed=many"], "config key seed:"),                                # wrong type
    (["seed=1:30"], "config key seed:"),                                # no YAML 1.2 integer
    (["prefill.cpu.sizes=[{dtype: float32, T: [512, -5]}]"],
     "config key prefill.cpu.sizes[0].T[1]:"),
    (["correctness.cpu.dtypes=[float8]"], "config key correctness.cpu.dtypes[0]:"),  # no dtype
    (["decode.backends=[triton]"], "config key decode.backends[0]:"),   # unknown backend
    (["seed=1.0"], "config key seed: 1.0 is not of type 'integer'"),
    (["seed=7.0"], "config key seed: 7.0 is not of type 'integer'"),
    (["decode.cpu.workers=0"], "config key decode.cpu.workers: 0 is less than the minimum of 1"),
    (["decode.cpu.worker_rounds=0"],
     "config key decode.cpu.worker_rounds: 0 is less than the minimum of 1"),
    (["no-equals-sign"], "KEY=VALUE"), (["=3"], "KEY=VALUE"), (["a..b=1"], "KEY=VALUE"),
    (["seed=[1,"], "the value of override 'seed=[1,' is not valid YAML"),
    # JSON Schema's bounds are false for NaN: unchecked, ``.nan`` runs a stage's whole budget
    # before its provenance refuses it
    (["seed=.nan"], "config key seed: nan is not of type 'integer'"),
    (["prefill.cpu.budget_s=.nan"], "config key prefill.cpu.budget_s: nan is not of type 'number'"),
    (["probe.cpu.matmul_call_ms=.inf"],
     "config key probe.cpu.matmul_call_ms: inf is not of type 'number'"),
    # prefill keys its results by (T, dtype): a second entry would replace the first's rows
    (["prefill.cpu.sizes=[{dtype: float32, T: [64], causal: [true]}, "
      "{dtype: float32, T: [64], causal: [false]}]"],
     "prefill.cpu.sizes[0] and [1] both hold float32 T=64"),
    (["prefill.cpu.sizes=[{dtype: float32, T: [64, 96]}, {dtype: float32, T: [96]}]"],
     "prefill.cpu.sizes[0] and [1] both hold float32 T=96"),
    # keys that bound one another, each accepted alone, would time the wrong size or fail
    # mid-run
    (["probe.cpu.matmul_min_n=1024", "probe.cpu.matmul_max_n=512"],
     "probe.cpu.matmul_min_n=1024 is above probe.cpu.matmul_max_n=512"),
    (["timing.min_rounds=12", "timing.max_rounds=10"],
     "timing.min_rounds=12 is above timing.max_rounds=10"),
    (["probe.map.gqa_groups=5"], "probe.map.gqa_groups=5 does not divide probe.map.heads=12"),
]


def test_the_default_config_is_valid_and_the_smoke_profile_merges_into_it_deeply():
    base = cfg.load_config()
    assert base["machine"] == "auto"
    smoke = cfg.load_config([layout.REPO_ROOT / "profiles" / "smoke.yaml"])
    profile = yaml.safe_load((layout.REPO_ROOT / "profiles" / "smoke.yaml").read_text())
    # a key the profile sets is replaced; its siblings the profile does not set survive
    assert smoke["prefill"]["cpu"]["sizes"] == profile["prefill"]["cpu"]["sizes"]
    assert smoke["prefill"]["implementations"] == base["prefill"]["implementations"]


def test_book_profile_is_the_chapter_grid():
    book = cfg.load_config([layout.REPO_ROOT / "profiles" / "book.yaml"])
    sizes = book["prefill"]["cuda"]["sizes"]  # the chapter's fp16 at its four lengths
    assert {s["dtype"] for s in sizes} == {"float16"} and not any(s.get("extra") for s in sizes)
    assert sorted(T for s in sizes for T in s["T"]) == [1024, 2048, 4096, 8192]
    assert max(book["decode"]["cuda"]["cache_lens"]) == 65536


@pytest.mark.parametrize(("overrides", "says"), REFUSED)
def test_a_bad_config_is_refused_naming_its_key(overrides, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        cfg.load_config(overrides=overrides)


@pytest.mark.parametrize(("text", "value"), [
    ("seed=123", 123), ("decode.cpu.cache_lens=[64, 96]", [64, 96]),
    ("seed=010", 10), ("decode.cpu.cache_lens=[010, 020]", [10, 20])])
def test_override_values_are_yaml_as_snakemake_reads_them(text, value):
    """YAML 1.2, as Snakemake's --config: YAML 1.1 would read 010 as octal 8 (and 1:30 as
    90, refused in REFUSED)."""
    key, _, _ = text.partition("=")
    raw = cfg.load_config(overrides=[text])
    for part in key.split("."):
        raw = raw[part]
    assert raw == value


@pytest.mark.parametrize("machine", ["Not A Slug", ""])  # an empty one is not "auto"
def test_a_bad_machine_is_refused_naming_it(machine):
    with pytest.raises(ValueError, match=re.escape(f"machine={machine!r}")):
        cfg.resolve(cfg.load_config(overrides=["device=cpu"]), machine=machine)


def test_threads_auto_follows_the_cores_given():
    auto = cfg.load_config(overrides=["device=cpu"])
    assert cfg.resolve_threads(auto) == cfg.available_cpus()
    assert cfg.resolve_threads(auto, cores=1) == 1
    explicit = cfg.load_config(overrides=["device=cpu", "threads=3"])
    assert cfg.resolve_threads(explicit, cores=1) == 3


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_stage_takes_the_block_of_its_device(device):
    raw = cfg.load_config(overrides=["prefill.cuda.heads=7"])
    effective = cfg.effective_config(raw, "prefill", device)
    assert effective["prefill"]["heads"] == raw["prefill"][device]["heads"]
    assert effective["prefill"]["sizes"] == raw["prefill"][device]["sizes"]
    assert set(effective) == {"device", "seed", *STAGES["prefill"].sections}


def test_effective_config_holds_only_the_sections_a_stage_reads():
    """Editing the cuda block changes no CPU stage's effective config, and editing one
    section changes only the stages that read it (the rule's rerun trigger and adopt)."""
    base = cfg.load_config()
    cuda_edit = cfg.load_config(overrides=["prefill.cuda.heads=3"])
    traffic_edit = cfg.load_config(overrides=["traffic.block_q_model=64"])
    for name in STAGES:
        assert cfg.effective_config(cuda_edit, name, "cpu") == \
            cfg.effective_config(base, name, "cpu")
        changed = cfg.effective_config(traffic_edit, name, "cpu") != \
            cfg.effective_config(base, name, "cpu")
        assert changed == ("traffic" in STAGES[name].sections), name


@pytest.mark.parametrize("stage", STAGES)
def test_params_are_frozen_and_built_from_the_effective_config(stage):
    module = importlib.import_module(STAGES[stage].module)
    params = module.Params.from_config(cfg.effective_config(cfg.load_config(), stage, "cpu"))
    hash(params)  # frozen and hashable: tuples, not lists
    fields = dataclasses.fields(params)
    if fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(params, fields[0].name, None)


def _leaves(schema: dict, path: str = ""):
    """Every property schema under ``schema`` (and each oneOf alternative), with its path."""
    for name, sub in schema.get("properties", {}).items():
        alternatives = sub.get("oneOf", [sub])
        for i, alt in enumerate(alternatives):
            yield f"{path}{name}" + (f"|{i}" if len(alternatives) > 1 else ""), alt
        yield from _leaves(sub, f"{path}{name}.")


# the config schema with its $refs read in (each field's own description kept)
@pytest.mark.parametrize("path_and_field", list(_leaves(validation.load("config.schema.json"))),
                         ids=lambda p: p[0])
def test_every_schema_field_has_description_type_and_bounds(path_and_field):
    path, field = path_and_field
    assert field.get("description"), f"{path} has no description"
    types = field.get("type")
    assert types, f"{path} has no type"
    types = types if isinstance(types, list) else [types]
    if "object" in types:
        assert field.get("additionalProperties") is False, f"{path} accepts unknown keys"
    if "integer" in types or "number" in types:
        assert "maximum" in field and ("minimum" in field or "exclusiveMinimum" in field), path
    if "array" in types:
        assert "minItems" in field and "maxItems" in field, f"{path} has no length bounds"
    if "string" in types:
        assert {"enum", "pattern", "const"} & set(field), f"{path} accepts any string"


def test_the_override_examples_given_are_accepted():
    """The examples config.yaml's header and parse_override's error give are real keys."""
    header = layout.CONFIG_FILE.read_text(encoding="utf-8").splitlines()[3]
    example = re.search(r"--set (\S+)", header).group(1)
    cfg.load_config(overrides=[example])
    with pytest.raises(ValueError) as info:
        cfg.parse_override("no-equals")
    cfg.load_config(overrides=[re.search(r"e\.g\. (\S+)\)", str(info.value)).group(1)])


def test_the_stage_help_examples_are_accepted():
    """Each example `inferlab stage --help` prints is parsed by the stage command's own
    parser and its config resolved as ``runner.cli_stage`` resolves it; an example naming
    no config key (``--set prefill.cpu.lengths=...``) is refused."""
    import shlex

    from inferlab.workflow.cli import STAGE_EXAMPLES, build_parser

    parser = build_parser()
    stage_help = next(a for a in parser._actions if a.dest == "command").choices["stage"]
    assert all(f"  {e}" in stage_help.format_help() for e in STAGE_EXAMPLES)

    def resolved(example: str) -> dict:
        words = shlex.split(example)
        assert words[:3] == ["python", "-m", "inferlab"], example
        args = parser.parse_args(words[3:])
        configfiles = [layout.REPO_ROOT / f for f in getattr(args, "configfile", [])]
        raw = cfg.load_config(configfiles, args.set, base=layout.CONFIG_FILE)
        return cfg.resolve(raw, machine="test-examples", check_device=False) \
            .effective(args.stage)

    for text in STAGE_EXAMPLES:
        resolved(text)  # raises, naming the key, where the schema refuses it
    with pytest.raises(ValueError, match="prefill.cpu.lengths"):
        resolved("python -m inferlab stage prefill --set prefill.cpu.lengths=[512,1024]")


# ------------------------------------------------------------------ a user's mistakes, named


@pytest.mark.parametrize("name", ["smoke\n", "smoke\r", "smoke\u2028", "smo\nke"])
def test_a_line_break_in_a_configs_grid_name_is_refused(name):
    """The schema's pattern takes "smoke\n" (its "$" matches before a final line break)."""
    raw = load_config()
    raw["grid"], raw["seed"] = name, raw["seed"] + 1  # another grid, named
    with pytest.raises(ValueError, match=r"grid"):
        resolve_grid(raw, "cpu")


def test_a_duplicate_key_is_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("seed: 0\ncorrectness:\n  heads: 2\n  cpu: {}\nseed: 7\n")
    with pytest.raises(ValueError, match=(r"config file .*dup.yaml.: key 'seed' appears twice: "
                                          r"line 1 and line 5; keep one")):
        load_config([path])
    path.write_text("correctness:\n  heads: 2\n  heads: 3\n")
    with pytest.raises(ValueError, match=r"key 'heads' appears twice: line 2 and line 3"):
        load_config([path])


def test_a_huge_config_is_refused_quickly_and_briefly(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("correctness:\n  cpu:\n    lengths:\n" + "    - 64\n" * 400_000)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"config file .*big.yaml. is 3.6 MB: more than the "
                                         r"1 MB a config file may be") as exc:
        load_config([big])
    assert time.perf_counter() - started < 1
    assert len(str(exc.value)) < 500
    long = tmp_path / "long.yaml"
    long.write_text("correctness:\n  cpu:\n    lengths: [" + "64, " * 90_000 + "64]\n")
    with pytest.raises(ValueError, match=r"^invalid config") as exc:
        load_config([long])
    assert len(str(exc.value)) < 4000
    with pytest.raises(ValueError, match=r"override .* is 1.1 MB: more than"):
        load_config(overrides=["seed=" + "1" * 1_100_000])


def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path):
    levels = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(8))  # 10**9 values from 1 kB
    path = tmp_path / "bomb.yaml"
    path.write_text(levels + "correctness:\n  cpu:\n    lengths: *i\n")
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"bomb.yaml. expands to more than 100,000 values"):
        load_config([path])
    assert time.perf_counter() - started < 5


NOT_A_FOLDER = r"is not a regular file \(a folder, FIFO or device\): give the YAML file itself"


@pytest.mark.parametrize(("kind", "says"), [
    ("missing", r"does not exist"),
    ("malformed", r"is not valid YAML"),
    ("utf16", r"is not UTF-8 text \(byte 0xff at offset 0\); save it as UTF-8"),
    ("list", r"must hold a mapping of keys, not list"),
    ("fifo", NOT_A_FOLDER), ("device", NOT_A_FOLDER), ("folder", NOT_A_FOLDER)])
def test_a_bad_config_file_is_named_with_what_is_wrong(tmp_path, kind, says):
    path = {"device": Path("/dev/zero"), "folder": tmp_path}.get(kind, tmp_path / f"{kind}.yaml")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("malformed", "utf16", "list"):
        path.write_bytes({"malformed": b"prefill: [unclosed\n", "list": b"- seed\n",
                          "utf16": "seed: 1\n".encode("utf-16")}[kind])
    with pytest.raises(ValueError, match=rf"^config file {re.escape(repr(str(path)))} {says}"):
        load_config([path])


@given(name=st.text(max_size=40))  # any code point, lone surrogates too (argv has them)
@example(name="cpu@smoke\n")
@example(name="smoke\n")
@example(name="smo\nke")
@example(name="smoke\u2028")
def test_a_machine_or_grid_name_is_a_slug_or_refused(name):
    for check in (layout.check_machine, layout.check_grid, layout.check_key):
        try:
            check(name)
        except ValueError as exc:
            assert repr(name) in str(exc)
        else:
            assert name.isascii() and name.isprintable() and "\n" not in name
            assert name == name.strip() and "/" not in name


def test_a_grid_is_none_for_config_yaml_and_a_name_only_it_has_otherwise():
    base = load_config()
    assert resolve_grid(base, "cpu", default=base) is None
    # a change that no stage reads (here the machine) is still the book grid
    assert resolve_grid(load_config(overrides=["machine=other"]), "cpu", default=base) is None
    unnamed = load_config(overrides=["prefill.cpu.heads=3"])
    assert re.fullmatch(r"custom-[0-9a-f]{8}", resolve_grid(unnamed, "cpu", default=base))
    smoke = REPO / "profiles" / "smoke.yaml"
    assert resolve_grid(load_config([smoke]), "cpu", default=base) == "smoke"  # the profile itself
    others = [load_config([smoke], [override])
              for override in ("prefill.cpu.heads=3", "prefill.cpu.heads=4", "seed=5")]
    grids = [resolve_grid(raw, "cpu", default=base) for raw in others]
    assert len(set(grids)) == 3 and all(g.startswith("smoke-") for g in grids), grids
    assert all(layout.check_grid(g) == g for g in grids)
    mine = load_config(overrides=["grid=mine", "prefill.cpu.heads=3"])
    assert resolve_grid(mine, "cpu", default=base).startswith("mine-")  # no profile names it
    # the book grid stays the book grid, whatever name a config gives it
    assert resolve_grid(load_config(overrides=["grid=smoke"]), "cpu", default=base) is None


def test_the_snakefile_refuses_a_path_with_a_space_and_a_bad_config_up_front(tmp_path):
    """As the command line does: a float seed (which Snakemake's own validate would take
    for an integer) is refused naming the key."""
    from tests.pipeline_repo import run

    repo = copy_repo(tmp_path / "with space" / "repo")
    dry = run(repo, "-n", "--cores", "1")
    assert dry.returncode != 0
    text = dry.stdout + dry.stderr
    assert "holds a space" in text and "exit status 127" in text, text[-3000:]
    make = subprocess.run(["make", "-n", "setup"], cwd=repo, capture_output=True, text=True,
                          timeout=60)
    assert make.returncode != 0
    assert "holds a space" in make.stdout + make.stderr
    repo = repo.rename(tmp_path / "repo")
    dry = run(repo, "-n", "--cores", "1", "--config", "seed=1.0")
    assert dry.returncode != 0
    assert "config key seed: 1.0 is not of type 'integer'" in dry.stdout + dry.stderr, \
        (dry.stdout + dry.stderr)[-3000:]

