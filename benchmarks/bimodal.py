"""Why a timing alternates between two values, and what steadies it.

A benchmark is only as good as its second run: naive causal attention at 256 tokens used
to read about 5 ms in one run and 9 ms in the next. Much of the variance between runs
comes from process state that repetitions inside one process never sample (pyperf's
lesson), so each setting here is timed in several fresh worker processes, each warming
up and then timing the same call many times:

* ``default``:      one thread, glibc's allocator as it comes;
* ``2 threads``:    two OpenMP threads on this 2-vCPU VM;
* ``2 passive``:    two threads with OMP_WAIT_POLICY=PASSIVE (no spin-waiting);
* ``malloc fixed``: one thread, glibc's mmap threshold and trim threshold fixed at 1 GiB
                    (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_): large buffers stay
                    on the heap, are reused warm and never handed back to the kernel;
* ``malloc fixed, 2 threads``;
* ``steady`` and ``steady, 2 threads``: what every pipeline stage does,
                    ``inferlab.workflow.runner.steady_process()`` (glibc: no mmap, no trimming, the
                    heap grown 256 MiB at a time; OpenMP waits passively).

For each setting it prints, over the workers, the median per worker, the spread between
workers (max/min - 1: the between-run spread) and the spread of calls inside a worker
(p90/p10 - 1: bimodality within a run), and the minor page faults per call (a buffer
handed back to the kernel and taken again faults on every page).

    .venv/bin/python benchmarks/bimodal.py [--workers 6] [--calls 60] [--T 256 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GIB = str(1 << 30)
FIXED = {"MALLOC_MMAP_THRESHOLD_": GIB, "MALLOC_TRIM_THRESHOLD_": GIB}
SETTINGS = {  # name: (environment, threads, call the pipeline's steady_process first)
    "default": ({}, 1, False),
    "2 threads": ({}, 2, False),
    "2 passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, 2, False),
    "malloc fixed": (FIXED, 1, False),
    "malloc fixed, 2 threads": (FIXED, 2, False),
    "steady": ({}, 1, True),
    "steady, 2 threads": ({}, 2, True),
}

WORKER = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
{steady}
import torch
from inferlab.algorithms.attention import naive_attention
torch.set_num_threads({threads})
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 12, {T}, 64, generator=g) for _ in range(3))
for _ in range(5):
    naive_attention(q, k, v, True)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
times = []
for _ in range({calls}):
    t = time.perf_counter()
    naive_attention(q, k, v, True)
    times.append((time.perf_counter() - t) * 1e3)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({{"times": times, "faults_per_call": faults / {calls}}}))
"""


def worker(setting: str, T: int, calls: int) -> dict:
    env_extra, threads, steady = SETTINGS[setting]
    env = {**os.environ, **env_extra}
    code = WORKER.format(repo=str(REPO), threads=threads, T=T, calls=calls, steady=(
        "from inferlab.workflow.runner import steady_process; steady_process()" if steady else ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    medians = [statistics.median(r["times"]) for r in runs]
    inside = []
    for r in runs:
        deciles = statistics.quantiles(r["times"], n=10)
        inside.append(deciles[-1] / deciles[0] - 1)
    return {"median_ms": statistics.median(medians), "worker_medians_ms": medians,
            "between_workers": max(medians) / min(medians) - 1,
            "inside_worker_p90_p10": statistics.median(inside),
            "faults_per_call": statistics.median(r["faults_per_call"] for r in runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--T", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {}
    print(f"{'T':>5}  {'setting':<24} {'median ms':>9}  {'between workers':>15}  "
          f"{'p90/p10 in worker':>17}  {'faults/call':>11}")
    for T in args.T:
        runs: dict[str, list[dict]] = {setting: [] for setting in SETTINGS}
        for _ in range(args.workers):  # settings interleaved, so drift hits all alike
            for setting in SETTINGS:
                runs[setting].append(worker(setting, T, args.calls))
        for setting in SETTINGS:
            results[f"{T} {setting}"] = s = summary(runs[setting])
            print(f"{T:>5}  {setting:<24} {s['median_ms']:>9.3f}  "
                  f"{s['between_workers']:>15.1%}  {s['inside_worker_p90_p10']:>17.1%}  "
                  f"{s['faults_per_call']:>11.0f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
