"""Shared fixtures: a seeded generator and a maker of random (B, H, T, D) q, k, v; and the
session's check that the tests leave the checkout as they found it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch


def _import_kernels_interpreted() -> None:
    """Load inferlab.algorithms.kernels once, before any test module does, with TRITON_INTERPRET=1
    unless the caller set it (``TRITON_INTERPRET=0`` compiles them on a CUDA machine):
    Triton's @jit reads it at import, so whichever test imported the module first (a
    stage that times the kernels on CUDA) would otherwise decide for the kernel tests.
    The variable is put back afterwards: the pipelines tests start must not inherit it."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import inferlab.algorithms.kernels  # noqa: F401 - imported for its side effect on Triton's jit
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


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the report's browser tests (tests/browser.py); skipped with
    the reason where none can start, failed under INFERLAB_REQUIRE_BROWSER=1 (CI)."""
    from browser import chromium, why_not

    reason = why_not()
    if reason and os.environ.get("INFERLAB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"INFERLAB_REQUIRE_BROWSER=1 but {reason}")
    if reason:
        pytest.skip(reason)
    with chromium() as b:
        yield b


# ---------------------------------------------------------------- serial tests

# Files whose tests hold wall-clock bounds (sleeps read back, the timing harness's rounds):
# marked `serial`, which `make test` runs alone after the parallel run (pytest -n 2) of the
# rest, so no second worker shares the cores while they time.
SERIAL_FILES = {"test_measure.py"}
# Single tests that count page faults of a process: another worker's memory traffic beside
# them made one fail once in a parallel run (it passes alone).
SERIAL_TESTS = {"test_the_steady_process_keeps_freed_buffers_warm_and_records_it",
                "test_the_steady_process_keeps_buffers_warm_past_two_gib"}
# `make test` runs `pytest -n 2 --dist loadfile --no-loadscope-reorder`: each file goes
# whole to one worker (its module fixtures, a rendered report, the Slurm cluster, are made
# once), in the order below. The files that take longest start first, so that neither
# worker is left with a long file at the end: the Slurm tests (mostly waiting for Slurm,
# which the other worker fills; they skip at once without it) and the session's pipeline
# (tests/pipeline_repo.built), then the next longest.
FIRST = ("test_slurm.py", "test_pipeline.py", "test_browser.py", "test_stages.py",
         "test_kernels.py", "test_triggers.py", "test_report.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL_FILES or item.originalname in SERIAL_TESTS:
            item.add_marker(pytest.mark.serial)
    items.sort(key=lambda item: (FIRST.index(item.path.name) if item.path.name in FIRST
                                 else len(FIRST)))


# ---------------------------------------------------------------- the checkout as found

# What a test session may add to a checkout: the venv and the caches of Python, pytest,
# hypothesis and ruff. Anything else (a .snakemake/ left by a test that ran Snakemake here
# made the next `make evidence` adopt nothing, issue 18) fails the session: tests that run
# Snakemake, a stage or the CLI do so in a temporary copy (tests/pipeline_repo.py).
CHECKOUT = Path(__file__).resolve().parents[1]
MAY_BE_LEFT = (".venv", ".pytest_cache/", ".hypothesis/", ".ruff_cache/")
_BEFORE = pytest.StashKey[set]()
_LEFT = pytest.StashKey[list]()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def checkout_status(root: Path = CHECKOUT) -> set[str] | None:
    """``git status --porcelain --ignored`` lines, or None unless ``root`` is the top of a
    git checkout (an unpacked sdist; mutmut's copy in mutants/, inside the checkout)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != root.resolve():
        return None
    status = _git(root, "status", "--porcelain", "--ignored")
    return None if status is None else set(status.splitlines())


def left_behind(before: set[str], after: set[str]) -> list[str]:
    """Status lines new since ``before``, except the venv and the caches."""
    def allowed(line: str) -> bool:
        path = line[3:].strip('"')
        return path.startswith(MAY_BE_LEFT) or path.rstrip("/").endswith("__pycache__")
    return sorted(line for line in after - before if not allowed(line))


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # xdist's controller (or no xdist)
        status = checkout_status()
        if status is not None:
            session.config.stash[_BEFORE] = status


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    after = checkout_status() if before is not None else None
    if after is None:
        return
    left = left_behind(before, after)
    session.config.stash[_LEFT] = left
    if left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.section("the tests changed the checkout", red=True)
        terminalreporter.write_line("git status --porcelain --ignored lists, new since the "
                                    "session started (run such a test in a temporary copy, "
                                    "tests/pipeline_repo.py's copy_repo):")
        for line in left:
            terminalreporter.write_line(f"  {line}")
