"""The stages' seeded inputs (inferlab.stages.common.random_qkv): drawn on the device that
uses them, and on a CPU exactly the numbers the committed CPU evidence was computed from."""

from __future__ import annotations

import pytest
import torch

from inferlab.stages import common
from inferlab.stages.common import random_qkv


def _as_committed(shape, dtype, device, seed, keys=None):
    """random_qkv as it was when the committed CPU evidence was made (on the CPU, float32,
    one seeded CPU generator, then cast)."""
    B, H, T, D = shape
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn((B, H, T, D), generator=gen)
    k, v = (torch.randn((B, H, T if keys is None else keys, D), generator=gen) for _ in "kv")
    return tuple(t.to(device=device, dtype=common.DTYPES[dtype]) for t in (q, k, v))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("shape", "keys", "seed"), [
    ((1, 12, 1024, 64), None, 0),   # prefill's first point
    ((1, 3, 37, 17), None, 5),      # awkward sizes
    ((4, 12, 1, 64), 4096, 0),      # a decode point
])
def test_cpu_inputs_are_byte_for_byte_those_of_the_committed_evidence(shape, keys, seed, dtype):
    new = random_qkv(shape, dtype, "cpu", seed, keys=keys)
    old = _as_committed(shape, dtype, "cpu", seed, keys=keys)
    for a, b in zip(new, old, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def test_inputs_are_drawn_on_their_device_with_its_own_generator(monkeypatch):
    # Decode's 805 M samples at 65,536 keys and batch 8 took ~12 s per draw on the CPU,
    # repeated in every worker, before a transfer: on a GPU they are drawn there.
    seen = {"generators": [], "draws": []}
    real_generator, real_randn = torch.Generator, torch.randn

    def generator(device="cpu"):
        seen["generators"].append(str(device))
        return real_generator(device="cpu")  # a stand-in: this machine has no GPU

    def randn(size, generator=None, device=None, **kwargs):
        seen["draws"].append(str(device))
        return real_randn(size, generator=generator, **kwargs)

    monkeypatch.setattr(common.torch, "Generator", generator)
    monkeypatch.setattr(common.torch, "randn", randn)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self)
    random_qkv((8, 12, 1, 64), "float16", "cuda", 0, keys=64)
    assert seen == {"generators": ["cuda"], "draws": ["cuda"] * 3}
