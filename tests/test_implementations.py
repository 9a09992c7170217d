"""The implementations registry (inferlab.algorithms.implementations): an implementation
declared once appears everywhere that reads it, in process, no pipeline run: the schemas'
``impl`` enums and the config's ``implementations`` lists (``inferlab generate``), the
figures' colours and labels, and the prefill and decode stages' cases."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from inferlab.algorithms import implementations
from inferlab.algorithms.attention import naive_attention
from inferlab.algorithms.implementations import IMPLEMENTATIONS, Implementation
from inferlab.algorithms.partials import splitkv_decode
from inferlab.presentation import plotting
from inferlab.stages import decode, prefill
from inferlab.workflow import generate
from inferlab.workflow.config import effective_config, load_config

ROOT = Path(__file__).resolve().parent.parent


def _toy_prefill(q, k, v, causal, block_q, block_k):
    return naive_attention(q, k, v, causal)


TOYS = (Implementation("toy_flash", ("prefill",), "#123456", _toy_prefill, sized_by="block",
                       fused=True),
        Implementation("toy_decode", ("decode",), "#654321", splitkv_decode,
                       sized_by="splits"))


@pytest.fixture
def toys(monkeypatch):
    for toy in TOYS:
        monkeypatch.setitem(IMPLEMENTATIONS, toy.name, toy)


def _generated(name: str) -> dict:
    """schemas/<name> as ``inferlab generate`` would write it now."""
    rel = Path("schemas") / name
    make = generate.targets(ROOT)[rel]
    return json.loads(make((ROOT / rel).read_text(encoding="utf-8")))


def test_a_registered_implementation_is_in_its_stages_schemas(toys):
    def impls(table: str) -> list:
        return _generated(f"{table}.schema.json")["properties"]["impl"]["enum"]

    assert "toy_flash" in impls("prefill") and "toy_flash" not in impls("decode")
    assert "toy_decode" in impls("decode") and "toy_decode" not in impls("prefill")
    assert {"toy_flash", "toy_decode"} <= set(impls("series"))


def test_a_registered_implementation_is_a_name_the_config_accepts(toys):
    config = _generated("config.schema.json")["properties"]
    listed = {stage: config[stage]["properties"]["implementations"]["items"]["enum"]
              for stage in ("prefill", "decode")}
    assert "toy_flash" in listed["prefill"] and "toy_decode" in listed["decode"]
    assert listed["prefill"].count("sdpa") == 1  # every backend under one name
    assert config["prefill"]["properties"]["implementations"]["maxItems"] == \
        len(listed["prefill"])


def test_a_registered_implementation_has_its_colour_and_label(toys):
    assert plotting.impl_label({"impl": "toy_flash", "block_q": 64}) == "toy_flash B=64"
    assert plotting.impl_label({"impl": "toy_decode", "splits": 1}) == "toy_decode, 1 split"
    assert plotting.colour("toy_flash") == "#123456"
    assert plotting.colour("toy_flash B=512") != "#123456"  # lighter: a larger tile


def _params(module, stage: str, overrides: list[str]):
    raw = load_config(overrides=["device=cpu", *overrides])
    return module.Params.from_config(effective_config(raw, stage, "cpu"))


def test_a_registered_prefill_implementation_is_timed_by_the_prefill_stage(toys, make_qkv):
    params = _params(prefill, "prefill", ["prefill.d=16", "prefill.blocks=[16, 32]"])
    params = replace(params, implementations=("naive", "toy_flash"))
    q, k, v = make_qkv((1, 2, 40, 16))
    cases, meta, refused = prefill._cases(params, q, k, v, True, ((), []), {})
    assert list(cases) == ["naive causal", "toy_flash block=16 causal",
                           "toy_flash block=32 causal"] and not refused
    assert meta["toy_flash block=32 causal"] == {"impl": "toy_flash", "fused_sdpa": False,
                                                 "block_q": 32, "block_k": 32, "causal": True}
    assert torch.equal(cases["toy_flash block=16 causal"](), naive_attention(q, k, v, True))


def test_a_registered_decode_implementation_is_timed_by_the_decode_stage(toys, make_qkv):
    params = _params(decode, "decode", ["decode.d=16", "decode.splits=[1, 3]"])
    params = replace(params, implementations=("toy_decode",))
    q, k, v = make_qkv((1, 2, 1, 16), keys=40)
    cases, meta, refused = decode._cases(params, q, k, v, ((), []), {}, None)
    assert list(cases) == ["toy_decode splits=1", "toy_decode splits=3"] and not refused
    assert meta["toy_decode splits=3"]["splits"] == 3
    assert torch.equal(cases["toy_decode splits=3"](), splitkv_decode(q, k, v, 3))


def test_an_unknown_implementation_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="impl='nope' is not an implementation.*naive"):
        implementations.get("nope")


def test_every_triton_kernel_declares_its_launch_configurations():
    kernels = [i for i in IMPLEMENTATIONS.values() if i.launch is not None]
    assert {i.name for i in kernels} == {"triton_flash", "triton_decode"}
    for i in kernels:
        assert i.devices == ("cuda",) and i.launch.parse(i.launch.default.name).name == \
            i.launch.default.name
