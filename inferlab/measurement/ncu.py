"""DRAM bytes per kernel, read from Nsight Compute (``ncu``), beside the traffic model.

With our Triton kernels' known tiles and the hardware's counters the traffic model is
tested directly. Each case (naive attention, SDPA forced to each fused backend, our
kernels) runs once per point, fp16, 12 heads, d = 64, batch 1: prefill (full attention) at
T tokens, decode (one query) against a cache of T keys, each in its own process under
``ncu``, the call inside the NVTX range ``measure`` (warm-up, compilation and inputs are
not counted)::

    ncu --csv --print-units base --clock-control none --nvtx --nvtx-include measure/ \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        python -m inferlab.measurement.ncu case STAGE NAME T

``run --tokens T.. --cache-lens T.. --limit-s S --out FILE`` writes one CSV row per case
and point: bytes read and written summed over its kernels, their names, the model's bytes
where the tile is known, and a status saying why where ncu gave nothing (under gVisor ncu
is not started: ``sandbox.ncu_blocked``). The longest prefill first, then decode; a case
not started within S seconds is a row saying so. scripts/gpu-call.sh runs it last.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

from inferlab.algorithms.traffic import decode_cache_bytes, naive_hbm_elements, tiled_hbm_elements
from inferlab.measurement import sandbox

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
CASES = {"prefill": ("naive", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn",
                     "triton_flash block=64", "triton_flash block=128"),
         "decode": ("naive", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn",
                    "triton_decode splits=16")}
HEADS, D, TRITON_BLOCK_N = 12, 64, 64
CASE_TIMEOUT_S = 60.0  # one case under ncu: ~7 s at 4,096 tokens on the H200
_UNIT_BYTES = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
# T: the prefill's tokens, or the decode's cache length (keys); its query is one token
FIELDS = ("stage", "case", "T", "heads", "d", "dtype", "kernels", "dram_read_bytes",
          "dram_write_bytes", "model_bytes", "status")


def parse_csv(text: str) -> list[dict]:
    """ncu's CSV (``--csv``, one row per kernel and metric) -> one dict per kernel launch:
    {"id", "kernel", <metric>: bytes}. Lines before the header (the program's own output,
    ``==PROF==`` notices) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    launches: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") not in METRICS:
            continue
        unit = (row.get("Metric Unit") or "byte").strip().lower()
        if unit not in _UNIT_BYTES:
            raise ValueError(f"ncu metric {row['Metric Name']} has unit {unit!r}; expected "
                             f"one of {sorted(_UNIT_BYTES)} (run ncu with --print-units base)")
        value = float(row["Metric Value"].replace(",", "")) * _UNIT_BYTES[unit]
        launch = launches.setdefault(row["ID"], {"id": row["ID"], "kernel": row["Kernel Name"]})
        launch[row["Metric Name"]] = value
    return list(launches.values())


def model_bytes(stage: str, case: str, T: int, itemsize: int = 2) -> int | None:
    """The traffic model's bytes for ``case`` at T (batch 1): for prefill (full attention)
    naive's score passes or our kernel's tile, for decode the cache read once (K and V,
    every head and key) by any case; None for a prefill SDPA case (its tile is not known)."""
    if stage == "decode":
        return decode_cache_bytes(1, HEADS, T, D, itemsize)
    if case == "naive":
        return HEADS * naive_hbm_elements(T, D) * itemsize
    if case.startswith("triton_flash block="):
        block_q = int(case.split("=")[1])
        return HEADS * tiled_hbm_elements(T, D, block_q, TRITON_BLOCK_N) * itemsize
    return None


def _run_case(stage: str, case: str, T: int) -> None:
    """Inside ncu: the case once untimed (compiles, warms), then once in range ``measure``."""
    import torch

    from inferlab.algorithms import kernels
    from inferlab.algorithms.attention import naive_attention
    from inferlab.measurement.backends import run_sdpa

    gen = torch.Generator(device="cpu").manual_seed(0)
    # q: (1, H, T or 1, D); k, v: (1, H, T, D)
    q = torch.randn(1, HEADS, T if stage == "prefill" else 1, D, generator=gen)
    k, v = (torch.randn(1, HEADS, T, D, generator=gen) for _ in range(2))
    q, k, v = (t.to("cuda", torch.float16) for t in (q, k, v))
    name, _, value = case.partition("=")
    if case == "naive":
        fn = lambda: naive_attention(q, k, v)  # noqa: E731
    elif case.startswith("sdpa_"):
        fn = lambda: run_sdpa(q, k, v, case.removeprefix("sdpa_"))  # noqa: E731
    elif name == "triton_flash block":
        fn = lambda: kernels.flash_attention(q, k, v, False, int(value), TRITON_BLOCK_N)  # noqa: E731
    else:
        fn = lambda: kernels.flash_decode(q, k, v, int(value))  # noqa: E731
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def _point(stage: str, case: str, T: int) -> dict:
    """The fields of a row that say what was measured, and the model's bytes for it."""
    return {"stage": stage, "case": case, "T": T, "heads": HEADS, "d": D, "dtype": "float16",
            "model_bytes": model_bytes(stage, case, T)}


def _one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def measure(stage: str, case: str, T: int, ncu: str | None, timeout_s: float,
            blocked: str | None = None) -> dict:
    """One row of ``FIELDS`` for ``case`` at T: ncu's bytes, or the reason there are none
    (``blocked``: why this machine's runtime cannot give counters, ``sandbox.ncu_blocked``;
    then ncu is not started at all)."""
    row = _point(stage, case, T)
    if ncu is None:
        return {**row, "status": "unavailable: ncu is not on the PATH"}
    if blocked is not None:
        return {**row, "status": blocked}
    command = [ncu, "--csv", "--print-units", "base", "--clock-control", "none", "--nvtx",
               "--nvtx-include", "measure/", "--metrics", ",".join(METRICS), sys.executable,
               "-m", "inferlab.measurement.ncu", "case", stage, case, str(T)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "status": f"error: ncu took over {timeout_s:.0f} s"}
    launches = parse_csv(done.stdout)
    if done.returncode != 0 or not launches:
        why = _one_line(done.stderr + done.stdout)
        return {**row, "status": f"error: ncu exit {done.returncode}, {len(launches)} "
                                 f"kernels measured: {why}"}
    return {**row, "kernels": "; ".join(launch["kernel"][:80] for launch in launches),
            "dram_read_bytes": sum(launch.get(METRICS[0], 0.0) for launch in launches),
            "dram_write_bytes": sum(launch.get(METRICS[1], 0.0) for launch in launches),
            "status": "ok"}


def write_rows(rows: list[dict], path: Path) -> None:
    """The rows so far, replaced whole: a step killed mid-write keeps the last ones."""
    part = path.with_name(path.name + ".part")
    with part.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    part.replace(path)


def points(tokens: list[int], cache_lens: list[int]) -> list[tuple[str, str, int]]:
    """(stage, case, T) in the order they are measured: the longest prefill first (naive's
    traffic grows as T², so that is where the model is tested hardest), then decode."""
    return ([("prefill", case, T) for T in sorted(tokens, reverse=True)
             for case in CASES["prefill"]]
            + [("decode", case, T) for T in cache_lens for case in CASES["decode"]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.measurement.ncu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="every case at every point under ncu -> a CSV of bytes")
    run.add_argument("--tokens", type=int, nargs="+", default=[4096], help="prefill lengths")
    run.add_argument("--cache-lens", type=int, nargs="*", default=[], help="decode caches")
    run.add_argument("--limit-s", type=float, default=math.inf,
                     help="start no case after this many seconds (its row says so)")
    run.add_argument("--out", type=Path, required=True)
    one = sub.add_parser("case", help="(inside ncu) run one case in the NVTX range measure")
    one.add_argument("stage", choices=list(CASES))
    one.add_argument("case")
    one.add_argument("T", type=int)
    args = parser.parse_args(argv)
    if args.command == "case":
        if args.case not in CASES[args.stage]:
            parser.error(f"{args.stage} has no case {args.case!r}: {CASES[args.stage]}")
        _run_case(args.stage, args.case, args.T)
        return 0
    rows, blocked = [], sandbox.ncu_blocked(sandbox.this_machine())
    started = time.monotonic()
    for stage, case, T in points(args.tokens, args.cache_lens):
        left = args.limit_s - (time.monotonic() - started)
        if left <= 0:
            rows.append({**_point(stage, case, T),
                         "status": f"not measured: the step's {args.limit_s:g} s ran out"})
        else:
            rows.append(measure(stage, case, T, shutil.which("ncu"),
                                min(CASE_TIMEOUT_S, left), blocked))
        write_rows(rows, args.out)  # after each case: a step stopped at its limit keeps them
    return 0


if __name__ == "__main__":
    sys.exit(main())
