"""Launch configurations of our Triton kernels: timed on the GPU at hand (``inferlab
tune``), read back by the prefill and decode stages.

``python -m inferlab tune --limit-s S`` times each Triton kernel's configurations (its
registry entry's ``Launch.configs``) at a few points of the config's CUDA grid: for a
prefill kernel the two longest lengths of each dtype, both masks; for a decode kernel the
two longest caches at the smallest batch and the longest at the largest, in every layout
of heads. Each configuration is run once and checked as the stages check what they time
(``exactness.inexact``), then all are timed interleaved by the one harness. The fastest at
each point goes to ``results/{key}/tuning.json`` (``layout.tuning_path``).

On a CUDA machine a stage's point takes the configuration tuned at the nearest size
(lengths, or caches and programs, on a log scale) of the same kernel, head dim, dtype and
mask (or queries per program); without one, the kernel's default. Each row's ``kernel``
names what ran (``triton_flash[BM128,BN64,w8,s3]``). On a CPU the command refuses.
"""

from __future__ import annotations

import json
import math
import time
from functools import partial
from pathlib import Path

import torch

from inferlab.algorithms import implementations, kernels
from inferlab.algorithms.exactness import inexact
from inferlab.core import layout
from inferlab.measurement.measure import time_interleaved

# what must agree between a tuned point and the point a stage runs, and its sizes
MATCH = {"prefill": ("d", "dtype", "causal"), "decode": ("d", "dtype", "queries")}
SIZES = {"prefill": ("T",), "decode": ("cache_len", "programs")}


def load(path: Path) -> list[dict]:
    """The winners in a tuning file, [] when there is none. A file that is not what
    ``cli_tune`` writes is a ValueError naming it and the fix."""
    if not path.is_file():
        return []
    try:
        winners = json.loads(path.read_text(encoding="utf-8"))["winners"]
        for w in winners:
            implementations.get(w["impl"]).launch.parse(w["config"])
            missing = [k for k in MATCH[w["stage"]] + SIZES[w["stage"]] if k not in w]
            if missing:
                raise KeyError(f"a winner has no {missing}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a tuning file inferlab tune wrote ({exc}); delete it "
                         "or run `python -m inferlab tune` again") from None
    return winners


def choose(winners: list[dict], impl: str, stage: str, **point):
    """The configuration ``impl`` runs at ``point`` (the keys of ``MATCH`` and ``SIZES``):
    the one tuned at the nearest size alike, else the kernel's default."""
    launch = implementations.get(impl).launch
    alike = [w for w in winners if w["impl"] == impl and w["stage"] == stage
             and all(w[k] == point[k] for k in MATCH[stage])]
    if not alike:
        return launch.default

    def distance(w: dict) -> float:
        return sum(abs(math.log2(w[k] / point[k])) for k in SIZES[stage])

    return launch.parse(min(alike, key=distance)["config"])


def sm_count(device: str) -> int | None:
    """The multiprocessors of the CUDA device the stage runs on; None on a CPU."""
    if device != "cuda":
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _fastest(entry, q, k, v, causal: bool, launches: dict[str, tuple]) -> tuple[str | None, dict]:
    """(the label of the fastest exact launch, label -> median ms of each timed).
    launches: label -> (the mask or split count, the configuration). Each is run once
    and checked first (which also compiles it), the exact ones then timed interleaved."""
    cases = {label: partial(entry.run, q, k, v, arg, config)
             for label, (arg, config) in launches.items()}
    exact = {label: fn for label, fn in cases.items() if _exact(label, fn, q, k, v, causal)}
    if not exact:
        return None, {}
    timings = time_interleaved(exact, threads=1, device="cuda", warmup=1, min_rounds=3,
                               max_rounds=5, target=0.02, time_cap_s=30.0, min_run_s=0.002)
    ms = {label: t.median_ms for label, t in timings.items() if t.status == "ok"}
    return (min(ms, key=ms.get) if ms else None), ms


def _exact(label: str, fn, q, k, v, causal: bool) -> bool:
    """Whether one launch runs and is exact here; one that fails to compile or launch on
    this GPU (its Triton may refuse what the offline sm_90 compile accepted) is left out,
    saying why, and the others are still tuned."""
    try:
        bad = inexact(fn(), q, k, v, causal)
    except Exception as exc:  # noqa: BLE001 - any failure of one configuration
        print(f"[tune] {label} left out: {type(exc).__name__}: {str(exc)[:200]}")
        return False
    if bad is not None:
        print(f"[tune] {label} left out: inexact {bad}")
    return bad is None


def _inputs(shape: tuple[int, int, int, int], keys: int, dtype: str, seed: int):
    """Standard-normal q (B, H, T, D) and k, v (B, H, keys, D) on the GPU, seeded."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    B, H, _, D = shape
    return tuple(torch.randn(s, generator=gen, device="cuda").to(getattr(torch, dtype))
                 for s in (shape, (B, H, keys, D), (B, H, keys, D)))


def _prefill_points(params) -> list[tuple[int, str]]:
    """(T, dtype): the two longest lengths of each dtype of the prefill grid."""
    by_dtype: dict[str, set[int]] = {}
    for T, dtype, *_ in params.points():
        by_dtype.setdefault(dtype, set()).add(T)
    return [(T, dtype) for dtype, lengths in by_dtype.items() for T in sorted(lengths)[-2:]]


def _decode_points(params) -> list[tuple[int, int, str, int, int]]:
    """(cache_len, batch, dtype, heads, kv_heads): in each layout of heads and dtype, the
    two longest caches at its smallest batch and the longest at its largest."""
    grids: dict[tuple, list[tuple[int, int]]] = {}
    for cache_len, batch, dtype, heads, kv_heads, _ in params.points():
        grids.setdefault((dtype, heads, kv_heads), []).append((cache_len, batch))
    points = []
    for (dtype, heads, kv_heads), grid in grids.items():
        lengths = sorted({n for n, _ in grid})
        batches = sorted({b for _, b in grid})
        chosen = {*((n, batches[0]) for n in lengths[-2:]), (lengths[-1], batches[-1])}
        points += [(n, b, dtype, heads, kv_heads) for n, b in sorted(chosen)]
    return points


def tune_prefill(params, seed: int, stop_at: float, log) -> list[dict]:
    """The fastest configuration of each Triton prefill kernel at each tuned point."""
    winners = []
    for T, dtype in _prefill_points(params):
        q, k, v = _inputs((params.batch, params.heads, T, params.d), T, dtype, seed)
        for entry in implementations.of_stage("prefill"):
            if entry.launch is None or entry.name not in params.implementations:
                continue
            for causal in params.causal:
                if time.time() > stop_at:
                    return winners
                configs = entry.launch.configs(q.shape[3], q.element_size())
                best, ms = _fastest(entry, q, k, v, causal,
                                    {c.name: (causal, c) for c in configs})
                log(f"[tune] {entry.name} T={T} {dtype} causal={causal}: {best}")
                if best is not None:
                    winners.append({"impl": entry.name, "stage": "prefill", "d": params.d,
                                    "dtype": dtype, "causal": causal, "T": T, "config": best,
                                    "median_ms": ms})
    return winners


def tune_decode(params, seed: int, stop_at: float, log) -> list[dict]:
    """The fastest configuration, with its split rule's target, of each Triton decode
    kernel at each tuned point. The G query heads of a key/value head are its queries
    (``kernels.flash_decode``)."""
    sms = sm_count("cuda")
    winners = []
    for cache_len, batch, dtype, heads, kv_heads in _decode_points(params):
        queries = heads // kv_heads
        q, k, v = _inputs((batch, kv_heads, queries, params.d), cache_len, dtype, seed)
        for entry in implementations.of_stage("decode"):
            if entry.launch is None or entry.name not in params.implementations:
                continue
            if time.time() > stop_at:
                return winners
            launches = {c.full_name: (kernels.decode_splits(cache_len, batch * kv_heads, sms,
                                                            c.waves), c)
                        for c in entry.launch.configs(queries)}
            best, ms = _fastest(entry, q, k, v, False, launches)
            log(f"[tune] {entry.name} cache={cache_len} batch={batch} heads={heads}:{kv_heads}"
                f" {dtype}: {best}")
            if best is not None:
                winners.append({"impl": entry.name, "stage": "decode", "d": params.d,
                                "dtype": dtype, "queries": queries, "cache_len": cache_len,
                                "programs": batch * kv_heads, "config": best, "median_ms": ms})
    return winners


def cli_tune(root: Path, key: str, device: str, prefill, decode, seed: int,
             limit_s: float | None) -> int:
    """``inferlab tune``: time the kernels' configurations on this machine's GPU and write
    the winners to ``results/{key}/tuning.json``. ``prefill``, ``decode``: the stages'
    ``Params`` for this device."""
    if device != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"needs a CUDA device: it times our Triton kernels' launch "
                         f"configurations on the GPU, and this run's device is {device}. "
                         "On a CPU the stages run without a tuning file.")
    start = time.time()
    stop_at = math.inf if limit_s is None else start + limit_s
    winners = tune_prefill(prefill, seed, stop_at, print)
    winners += tune_decode(decode, seed, stop_at, print)
    path = layout.tuning_path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"device": torch.cuda.get_device_name(), "multiprocessors": sm_count("cuda"),
                "triton": kernels.triton.__version__,
                "torch": torch.__version__, "seconds": round(time.time() - start, 1),
                "limit_s": limit_s, "winners": winners}
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"[tune] {len(winners)} points tuned in {document['seconds']} s: {path}")
    return 0
