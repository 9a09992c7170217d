"""A simulated GPU clock and the time it keeps: the GPU call's dry run on a CPU, never
evidence.

The GPU call (``scripts/gpu-check.sh``, its plan ``inferlab.workflow.gpu_plan``) has to fit
its step limits on a machine no session here can use, so its dry run replays the plan on
this CPU with this clock in place of the real ones (``clocks.make_clock``). It calls
nothing: a timing of ``number`` calls answers the time the chapter published for that
call (``call_seconds``) and moves a *virtual clock* forward by their wall time on the GPU
(the call, the L2 flush and the launch-covering sleep of ``clocks._CudaClock``), so the
harness's budgets, caps and step limits run out as they would there. The chapter's GPU was
slower than the H200, so the dry run is a pessimistic rehearsal: budgets under pressure.

The chapter's figures ("What it saves: the numbers", fp16, 12 heads, d = 64, batch 1):

* fused (SDPA flash / efficient / cuDNN, our Triton kernel): 13.0 ms at 8,192 tokens (the
  slower of "7.8 and 13.0 ms"), as T**2 below it, causal 0.71 of full ("causal time 0.58
  to 0.71 of full");
* naive: the measured ratio to the fused kernel, 7.8, 13.5, 9.5 and 8.6 at 1,024 to 8,192
  tokens (the larger of the two runs), whatever the mask; SDPA's unfused math backend
  the same;
* tiled in plain PyTorch: 23 times naive ("13 to 23 times slower"), tiled_fast 13 times;
  causal 0.53 ("53 per cent of the block pairs");
* decode ("The decode shape"): split-KV in PyTorch (and the math backend) at least 400 us
  ("between roughly 400 and 1,070 microseconds") or the cache at 67 GB/s ("67 to 88
  GB/s"), the fused kernels at least 50 us (split-KV "slower, by up to eight times, for
  the short ones") or the cache at 50 GB/s; the cache is K and V of 12 heads, d = 64, fp16.

The probe's ceilings are the lent H200's own readings (the device tool's KINDS.md: a copy
at ~4.3 TB/s counting both ways, bf16 matmuls at ~790 TFLOP/s; fp32 assumed 50 TFLOP/s).
The times are the chapter's shape whatever the inputs' heads and head dim: the dry run
shrinks both so that this CPU can build the inputs at the planned lengths.

Virtual time: ``install(state)`` replaces ``time.time`` and ``time.perf_counter`` in this
process by the real clocks plus the seconds the simulated GPU has spent, kept in the file
``state`` that every process of the dry run shares (the stage, its timing workers, the
script, which reads it as text). ``time.monotonic`` stays real (timeouts of subprocesses).
A process start costs ``PROCESS_START_S`` more on the GPU (CUDA's context), added at install.

Impossible to take for evidence: only the dry run's start-up file installs it (never the
library), every timing's ``method`` starts with "SIMULATED", and the dry run writes into a
temporary copy of the repository under the machine id ``simulated-...``. Torch-free.
"""

from __future__ import annotations

import fcntl
import math
import os
import random
import time
import zlib
from collections.abc import Callable
from pathlib import Path

ENV = "INFERLAB_SIMULATED_GPU"  # the state file's path; set by the GPU call's dry run only
METHOD = ("SIMULATED GPU clock (inferlab.measurement.simclock): the chapter's published "
          "times at its shape (12 heads, d 64, fp16); nothing was run or timed. NOT A "
          "MEASUREMENT")

# prefill (module docstring)
FUSED_MS_AT_8192 = 13.0
NAIVE_OVER_FUSED = {1024: 7.8, 2048: 13.5, 4096: 9.5, 8192: 8.6}
TILED_OVER_NAIVE, TILED_FAST_OVER_NAIVE = 23.0, 13.0
CAUSAL_FUSED, CAUSAL_TILED = 0.71, 0.53
FUSED_PREFILL = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_flash")
# decode
SPLIT_FLOOR_S, SPLIT_GBS = 400e-6, 67.0
FUSED_FLOOR_S, FUSED_GBS = 50e-6, 50.0
UNFUSED_DECODE = ("splitkv", "sdpa_math")
CHAPTER_HEADS, CHAPTER_D, FP16_BYTES = 12, 64, 2
# the probe's ceilings (KINDS.md's H200)
COPY_GBS = 4300.0
MATMUL_TFLOPS = {"float16": 790.0, "bfloat16": 790.0, "float32": 50.0}
# what the real CUDA clock adds to each call (clocks._CudaClock): a read of 2 x 60 MB of
# L2 at 4.3 TB/s, and a sleep of twice a ~20 us launch plus its 20 us margin
FLUSH_S, COVER_S = 28e-6, 60e-6
LAUNCH_FLOOR_S = 5e-6
PROCESS_START_S = 3.0    # the GPU's torch import and CUDA context, beyond this CPU's start
NOISE_SD = 0.03          # seeded log-normal spread between timings, so intervals have width

_REAL_TIME, _REAL_PERF = time.time, time.perf_counter
_state: Path | None = None


# --------------------------------------------------------------------------- the model


def _naive_ratio(T: int) -> float:
    nearest = min(NAIVE_OVER_FUSED, key=lambda n: abs(math.log2(n) - math.log2(max(T, 1))))
    return NAIVE_OVER_FUSED[nearest]


def prefill_seconds(impl: str, T: int, batch: int, causal: bool) -> float:
    """The chapter's time of one prefill call of ``impl`` at ``T`` tokens."""
    fused = FUSED_MS_AT_8192 * 1e-3 * (T / 8192) ** 2 * batch
    naive = _naive_ratio(T) * fused
    if impl in FUSED_PREFILL:
        return fused * (CAUSAL_FUSED if causal else 1.0)
    if impl in ("naive", "sdpa_math"):
        return naive
    if impl in ("tiled", "tiled_fast"):
        factor = TILED_OVER_NAIVE if impl == "tiled" else TILED_FAST_OVER_NAIVE
        return factor * naive * (CAUSAL_TILED if causal else 1.0)
    raise ValueError(f"impl={impl!r} has no prefill time in the chapter's figures; expected "
                     f"naive, tiled, tiled_fast, sdpa_math or one of {FUSED_PREFILL}")


def decode_seconds(impl: str, cache_len: int, batch: int) -> float:
    """The chapter's time of one decode call of ``impl`` against ``cache_len`` keys."""
    cache_bytes = 2 * batch * CHAPTER_HEADS * cache_len * CHAPTER_D * FP16_BYTES
    if impl in UNFUSED_DECODE:
        return max(SPLIT_FLOOR_S, cache_bytes / (SPLIT_GBS * 1e9))
    if impl in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_decode"):
        return max(FUSED_FLOOR_S, cache_bytes / (FUSED_GBS * 1e9))
    raise ValueError(f"impl={impl!r} has no decode time in the chapter's figures; expected "
                     f"one of {UNFUSED_DECODE} or a fused kernel")


def wall_seconds(call_s: float) -> float:
    """One call's wall time under the real CUDA clock: the call, the flush, the sleep."""
    return call_s + FLUSH_S + COVER_S


def call_seconds(label: str, shapes: list[tuple[int, ...]], dtype: str = "float16",
                 itemsize: int = FP16_BYTES) -> float:
    """The simulated time of one call of the case ``label`` on inputs of ``shapes`` (of
    ``dtype``, ``itemsize`` bytes an element): attention (4-d inputs: a query length of 1
    is decode), a matmul (2-d, the probe's, labelled or not) or a copy (1-d)."""
    impl = label.split(" ")[0]
    four = [s for s in shapes if len(s) == 4]
    if four:
        t_q, t_k = min(s[2] for s in four), max(s[2] for s in four)
        batch = max(s[0] for s in four)
        if t_q == 1:
            return decode_seconds(impl, t_k, batch)
        return prefill_seconds(impl, t_k, batch, label.endswith(" causal"))
    if any(len(s) == 2 for s in shapes):
        n = max(s[0] for s in shapes if len(s) == 2)
        return max(LAUNCH_FLOOR_S, 2 * n**3 / (MATMUL_TFLOPS.get(dtype, 50.0) * 1e12))
    if shapes:
        moved = 2 * max(math.prod(s) for s in shapes) * itemsize  # read and written
        return max(LAUNCH_FLOOR_S, moved / (COPY_GBS * 1e9))
    return LAUNCH_FLOOR_S


# --------------------------------------------------------------------------- the clock


def _tensors(fn: Callable, depth: int = 3) -> list:
    """The tensors a case's callable closes over (its cells and defaults, and those of
    the callables in them), found by duck type: anything with a shape and a dtype."""
    found, todo, seen = [], [(fn, 0)], set()
    while todo:
        obj, level = todo.pop()
        if id(obj) in seen or level > depth:
            continue
        seen.add(id(obj))
        if hasattr(obj, "shape") and hasattr(obj, "dtype"):
            found.append(obj)
            continue
        inner = [c.cell_contents for c in (getattr(obj, "__closure__", None) or ())
                 if c.cell_contents is not None] if callable(obj) else []
        inner += list(getattr(obj, "__defaults__", None) or ())
        inner += list(getattr(obj, "args", ()) if hasattr(obj, "func") else ())
        todo += [(x, level + 1) for x in inner if callable(x) or hasattr(x, "shape")]
    return found


class SimulatedClock:
    """``clocks``' interface for the dry run: no call is made (module docstring). The
    harness names the case by setting ``label`` before the first timing."""

    method = METHOD

    def __init__(self, fn: Callable[[], object], label: str = ""):
        tensors = _tensors(fn)
        self.shapes = [tuple(int(n) for n in t.shape) for t in tensors]
        self.dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else "float16"
        self.itemsize = int(tensors[0].element_size()) if tensors else FP16_BYTES
        self.label = label
        self.last_wall_s: float | None = None
        self._random: random.Random | None = None

    def seconds_per_call(self, number: int) -> float:
        if self._random is None:  # seeded by the case, so a rerun draws the same times
            self._random = random.Random(zlib.crc32(f"{self.label} {self.shapes}".encode()))
        call_s = call_seconds(self.label, self.shapes, self.dtype, self.itemsize)
        seconds = call_s * math.exp(self._random.gauss(0.0, NOISE_SD))
        self.last_wall_s = wall_seconds(seconds)
        advance(number * self.last_wall_s)
        return seconds


# --------------------------------------------------------------------------- virtual time


def offset(state: Path | None = None) -> float:
    """The seconds the simulated GPU has spent so far (0 before any)."""
    path = state or _state
    try:
        return float(path.read_text() or 0.0) if path else 0.0
    except (OSError, ValueError):
        return 0.0


def advance(seconds: float, state: Path | None = None) -> None:
    """Move the shared virtual clock forward by ``seconds`` (locked: one writer at a time;
    the file replaced whole, so a reader never sees half a number)."""
    path = state or _state
    if path is None or seconds <= 0:
        return
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        spent = offset(path) + seconds
        partial = Path(f"{path}.{os.getpid()}.part")
        partial.write_text(f"{spent:.6f}\n")
        os.replace(partial, path)


def installed() -> bool:
    return _state is not None


def install(state: str | Path) -> None:
    """Simulated time in this process (module docstring); idempotent."""
    global _state
    if _state is not None:
        return
    _state = Path(state)
    time.time = lambda: _REAL_TIME() + offset()
    time.perf_counter = lambda: _REAL_PERF() + offset()
    advance(PROCESS_START_S)


def install_from_environment(environ: dict | None = None) -> None:
    """The dry run's start-up file calls this: install where ``ENV`` names a state file."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV):
        install(environ[ENV])
