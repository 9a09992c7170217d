"""Shared fixtures: a seeded generator and a maker of random (B, H, T, D) q, k, v."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch


def _import_kernels_interpreted() -> None:
    """Load inferlab.kernels once, before any test module does, with TRITON_INTERPRET=1
    unless the caller set it (``TRITON_INTERPRET=0`` compiles them on a CUDA machine):
    Triton's @jit reads it at import, so whichever test imported the module first (a
    stage that times the kernels on CUDA) would otherwise decide for the kernel tests.
    The variable is put back afterwards: the pipelines tests start must not inherit it."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import inferlab.kernels  # noqa: F401 - imported for its side effect on Triton's jit
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)


_import_kernels_interpreted()

SEED = 1234


@pytest.fixture
def rng() -> torch.Generator:
    """A CPU generator seeded afresh for every test, so each test is reproducible alone."""
    return torch.Generator(device="cpu").manual_seed(SEED)


def random_qkv(gen: torch.Generator, shape: tuple[int, int, int, int],
               dtype: torch.dtype = torch.float32, keys: int | None = None,
               device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standard-normal q (B, H, T, D) and k, v (B, H, keys or T, D), drawn then cast."""
    B, H, T, D = shape
    kv_shape = (B, H, T if keys is None else keys, D)
    q = torch.randn(shape, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(kv_shape, generator=gen, dtype=torch.float64) for _ in range(2))
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


@pytest.fixture(scope="session")
def draw_qkv() -> Callable[..., tuple[torch.Tensor, ...]]:
    """``random_qkv`` itself, for tests that bring their own generator (hypothesis)."""
    return random_qkv


@pytest.fixture
def make_qkv(rng: torch.Generator) -> Callable[..., tuple[torch.Tensor, ...]]:
    """``make_qkv((B, H, T, D), dtype=..., keys=...)`` drawing from the test's ``rng``."""
    return lambda shape, dtype=torch.float32, keys=None, device="cpu": random_qkv(
        rng, shape, dtype, keys, device)


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module of many tiny tensor ops, restored afterwards.

    Why: on a 2-core machine shared with other work, two OpenMP threads spin-wait on
    every small op; the attention tests took 233 s that way against 17 s with one
    thread (similar load, same tests). Timing tests must not use this.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
