"""inferlab.measurement.tuning: which points ``inferlab tune`` times, the file it writes as
the stages read it, the configuration a stage runs, and the refusal on a CPU. The timing
itself needs a CUDA device (the GPU call runs it)."""

from __future__ import annotations

import json

import pytest
import torch

from inferlab.algorithms import kernels
from inferlab.core import layout
from inferlab.measurement import tuning
from inferlab.stages import decode, prefill
from inferlab.workflow import cli
from inferlab.workflow.config import effective_config, load_config


def _book(module, stage: str):
    """The stage's Params of config.yaml's CUDA grid."""
    return module.Params.from_config(effective_config(load_config(), stage, "cuda"))


def test_tune_times_the_longest_lengths_and_caches_of_the_cuda_grid():
    assert tuning._prefill_points(_book(prefill, "prefill")) == [(4096, "float16"),
                                                                 (8192, "float16")]
    assert tuning._decode_points(_book(decode, "decode")) == [
        (16384, 1, "float16", 12, 12), (65536, 1, "float16", 12, 12),
        (65536, 8, "float16", 12, 12),
        (16384, 1, "float16", 28, 4), (65536, 1, "float16", 28, 4)]


def test_what_tune_writes_is_what_the_stages_run(monkeypatch, tmp_path, make_qkv):
    """tune_prefill and tune_decode on stand-ins for the GPU's timings (the fastest is the
    last configuration listed): the file they make reads back, and a stage's point takes
    the winner tuned nearest it."""
    monkeypatch.setattr(tuning, "_inputs", lambda shape, keys, dtype, seed: make_qkv(
        (1, 1, 2, shape[3]), getattr(torch, dtype), keys=2))  # small, on the CPU
    monkeypatch.setattr(tuning, "_fastest", lambda entry, q, k, v, causal, launches: (
        list(launches)[-1], dict.fromkeys(launches, 1.0)))
    monkeypatch.setattr(tuning, "sm_count", lambda device: 132)
    forever = float("inf")
    winners = tuning.tune_prefill(_book(prefill, "prefill"), 0, forever, print)
    winners += tuning.tune_decode(_book(decode, "decode"), 0, forever, print)
    path = layout.tuning_path(tmp_path, "cuda-test")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"winners": winners}))
    tuned = tuning.load(path)
    assert len(tuned) == 2 * 2 + 5  # two lengths x two masks; five decode points
    last_prefill = kernels.prefill_configs(64, 2)[-1]
    assert tuning.choose(tuned, "triton_flash", "prefill", d=64, dtype="float16", causal=True,
                         T=1024) == last_prefill
    grouped = tuning.choose(tuned, "triton_decode", "decode", d=64, dtype="float16",
                            queries=7, cache_len=16384, programs=4)
    assert grouped == kernels.decode_configs(7)[-1]


WINNERS = [{"impl": "triton_flash", "stage": "prefill", "d": 64, "dtype": "float16",
            "causal": True, "T": T, "config": config}
           for T, config in ((1024, "BM64,BN64,w4,s3"), (8192, "BM128,BN128,w8,s3"))]


@pytest.mark.parametrize(("point", "config"), [
    ({"T": 512}, "BM64,BN64,w4,s3"), ({"T": 2048}, "BM64,BN64,w4,s3"),
    ({"T": 4096}, "BM128,BN128,w8,s3"), ({"T": 65536}, "BM128,BN128,w8,s3"),
    # tuned nowhere alike: the kernel's default
    ({"d": 128}, None), ({"dtype": "bfloat16"}, None), ({"causal": False}, None)])
def test_a_point_takes_the_configuration_tuned_at_the_nearest_length_alike(point, config):
    chosen = tuning.choose(WINNERS, "triton_flash", "prefill",
                           **{"d": 64, "dtype": "float16", "causal": True, "T": 1024, **point})
    assert chosen == (kernels.DEFAULT_PREFILL if config is None
                      else kernels.PrefillConfig.parse(config))


def test_no_tuning_file_is_no_winners(tmp_path):
    assert tuning.load(tmp_path / "tuning.json") == []


@pytest.mark.parametrize("text", ["{", '{"winners": [{"impl": "nope"}]}',
                                  json.dumps({"winners": [{**WINNERS[0], "config": "fast"}]}),
                                  json.dumps({"winners": [{k: v for k, v in WINNERS[0].items()
                                                           if k != "T"}]})])
def test_a_bad_tuning_file_is_named_with_the_fix(tmp_path, text):
    path = tmp_path / "tuning.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path} is not a tuning file.*inferlab tune"):
        tuning.load(path)


def test_tune_on_a_cpu_refuses_saying_it_needs_cuda(capsys, tmp_path):
    (tmp_path / "config.yaml").write_bytes(layout.CONFIG_FILE.read_bytes())
    assert cli.main(["tune", "--root", str(tmp_path), "--limit-s", "60"]) == 2
    err = capsys.readouterr().err
    assert "inferlab tune: error: needs a CUDA device" in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()


def test_a_configuration_that_fails_or_errs_here_is_left_out_saying_why(capsys, make_qkv):
    from inferlab.algorithms.attention import naive_attention

    q, k, v = make_qkv((1, 2, 24, 16))

    def fails():
        raise RuntimeError("out of resource: shared memory, Required: 262144")

    assert tuning._exact("BM128,BN128,w8,s5", fails, q, k, v, True) is False
    assert tuning._exact("wrong", lambda: naive_attention(q, k, v, True) * 1.01, q, k, v,
                         True) is False
    assert tuning._exact("right", lambda: naive_attention(q, k, v, True), q, k, v, True)
    out = capsys.readouterr().out
    assert "BM128,BN128,w8,s5 left out: RuntimeError: out of resource" in out
    assert "wrong left out: inexact" in out and "right" not in out
