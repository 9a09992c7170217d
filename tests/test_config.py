"""inferlab.config: loading, merging, schema validation, "auto" resolution, typed params."""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest
import yaml

from inferlab import config as cfg
from inferlab.layout import STAGES

# (override, the key path the error must name): each is one kind of bad config
BAD_OVERRIDES = [
    ("bogus=1", "bogus"),                                       # unknown key, top level
    ("prefill.cpu.bogus=1", "prefill.cpu.bogus"),               # unknown key, nested
    ("seed=many", "seed"),                                      # wrong type
    ("prefill.cpu.lengths=[512, -5]", "prefill.cpu.lengths[1]"),  # negative length
    ("correctness.cpu.dtypes=[float8]", "correctness.cpu.dtypes[0]"),  # unknown dtype
    ("decode.backends=[triton]", "decode.backends[0]"),         # unknown backend
]


def _schema() -> dict:
    return json.loads(cfg.SCHEMA_PATH.read_text())


def test_default_config_is_valid():
    raw = cfg.load_config()
    assert raw["machine"] == "auto"


def test_smoke_profile_merges_deeply():
    base = cfg.load_config()
    smoke = cfg.load_config([cfg.REPO_ROOT / "profiles" / "smoke.yaml"])
    profile = yaml.safe_load((cfg.REPO_ROOT / "profiles" / "smoke.yaml").read_text())
    # a key the profile sets is replaced; its siblings the profile does not set survive
    assert smoke["prefill"]["cpu"]["lengths"] == profile["prefill"]["cpu"]["lengths"]
    assert smoke["prefill"]["implementations"] == base["prefill"]["implementations"]


def test_book_profile_is_the_chapter_grid():
    book = cfg.load_config([cfg.REPO_ROOT / "profiles" / "book.yaml"])
    assert book["prefill"]["cuda"]["lengths"] == [1024, 2048, 4096, 8192]
    assert book["prefill"]["cuda"]["dtypes"] == ["float16"]
    assert max(book["decode"]["cuda"]["cache_lens"]) == 65536


@pytest.mark.parametrize(("override", "key"), BAD_OVERRIDES)
def test_bad_config_names_the_key(override, key):
    with pytest.raises(ValueError, match="config key " + re.escape(key) + ":"):
        cfg.load_config(overrides=[override])


def test_override_values_are_yaml():
    seed = random.Random(7).randrange(1, 10**6)
    raw = cfg.load_config(overrides=[f"seed={seed}", "prefill.cpu.lengths=[64, 96]"])
    assert raw["seed"] == seed
    assert raw["prefill"]["cpu"]["lengths"] == [64, 96]


@pytest.mark.parametrize("text", ["no-equals-sign", "=3", "a..b=1"])
def test_malformed_override_is_refused(text):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        cfg.parse_override(text)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        cfg.load_config([tmp_path / "nope.yaml"])


def test_bad_machine_override_is_refused():
    with pytest.raises(ValueError, match="machine"):
        cfg.resolve(cfg.load_config(overrides=["device=cpu"]), machine="Not A Slug")


def test_threads_auto_and_explicit():
    auto = cfg.resolve(cfg.load_config(overrides=["device=cpu"]), machine="m")
    assert auto.threads == cfg.available_cpus()
    explicit = cfg.resolve(cfg.load_config(overrides=["device=cpu", "threads=3"]), machine="m")
    assert explicit.threads == 3


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_stage_takes_the_block_of_its_device(device):
    raw = cfg.load_config(overrides=["prefill.cuda.lengths=[4096, 8192]"])
    config = cfg.Config(machine="m", device=device, threads=1, seed=0, raw=raw)
    params = config.stage_params("prefill")
    assert params.lengths == tuple(raw["prefill"][device]["lengths"])
    assert params.dtypes == tuple(raw["prefill"][device]["dtypes"])
    assert config.stage_params("probe").dtypes == params.dtypes


@pytest.mark.parametrize("stage", STAGES)
def test_params_are_frozen_and_json_ready(stage):
    config = cfg.Config(machine="m", device="cpu", threads=1, seed=0, raw=cfg.load_config())
    params = config.stage_params(stage)
    assert json.loads(json.dumps(cfg.params_dict(params))) == cfg.params_dict(params)
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


@pytest.mark.parametrize("path_and_field", list(_leaves(_schema())), ids=lambda p: p[0])
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
