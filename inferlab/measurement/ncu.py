"""DRAM bytes per kernel, read from Nsight Compute (``ncu``), beside the traffic model.

The chapter compared time ratios with a modelled byte ratio at an assumed tile; with our
Triton kernel's known tile and the hardware's counters the model is tested directly.
One prefill point (fp16, 12 heads, d = 64, full attention, batch 1) is run once per case
(naive, SDPA forced to each fused backend, our ``flash_attention`` at two tiles), each in
its own process under ``ncu``, the call inside an NVTX range ``measure`` so that warm-up,
compilation and input kernels are not counted::

    ncu --csv --print-units base --clock-control none --nvtx --nvtx-include measure/ \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        python -m inferlab.measurement.ncu case NAME --tokens T

``ncu --csv`` prints one row per (kernel launch, metric): columns "ID", "Kernel Name",
"Metric Name", "Metric Unit", "Metric Value" among others (values may carry thousands
separators; ``--print-units base`` asks for bytes, other units are converted anyway).
``python -m inferlab.measurement.ncu run --tokens T --out FILE`` writes one CSV row per case: the
bytes read and written summed over its kernels, the kernel names, the model's bytes where
the tile is known, and a status saying why where ncu gave nothing (where the runtime rules
the counters out, gVisor, ncu is not started: ``sandbox.ncu_blocked``). Used by
scripts/gpu-check.sh; the rows travel in its tarball as logs/gpu-check/ncu-bytes.csv.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

from inferlab.measurement import sandbox

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
CASES = ("naive", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_flash block=64",
         "triton_flash block=128")
HEADS, D, TRITON_BLOCK_N = 12, 64, 64
_UNIT_BYTES = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
FIELDS = ("case", "T", "heads", "d", "dtype", "kernels", "dram_read_bytes",
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


def model_bytes(case: str, T: int, itemsize: int = 2) -> int | None:
    """The traffic model's bytes for ``case`` at T tokens (full attention, batch 1):
    naive's score passes, or our kernel's tile; None for SDPA (its tile is not known)."""
    from inferlab.algorithms.traffic import naive_hbm_elements, tiled_hbm_elements

    if case == "naive":
        return HEADS * naive_hbm_elements(T, D) * itemsize
    if case.startswith("triton_flash block="):
        block_q = int(case.split("=")[1])
        return HEADS * tiled_hbm_elements(T, D, block_q, TRITON_BLOCK_N) * itemsize
    return None


def _run_case(case: str, T: int) -> None:
    """Inside ncu: the case once untimed (compiles, warms), then once in range ``measure``."""
    import torch

    from inferlab.algorithms import kernels
    from inferlab.algorithms.attention import naive_attention
    from inferlab.measurement.backends import run_sdpa

    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, T, D, generator=gen).to("cuda", torch.float16)
               for _ in range(3))
    if case == "naive":
        fn = lambda: naive_attention(q, k, v)  # noqa: E731
    elif case.startswith("sdpa_"):
        fn = lambda: run_sdpa(q, k, v, case.removeprefix("sdpa_"))  # noqa: E731
    else:
        block = int(case.split("=")[1])
        fn = lambda: kernels.flash_attention(q, k, v, False, block, TRITON_BLOCK_N)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def _one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def measure(case: str, T: int, ncu: str | None, timeout_s: float,
            blocked: str | None = None) -> dict:
    """One row of ``FIELDS`` for ``case``: ncu's bytes, or the reason there are none
    (``blocked``: why this machine's runtime cannot give counters, ``sandbox.ncu_blocked``;
    then ncu is not started at all)."""
    row = {"case": case, "T": T, "heads": HEADS, "d": D, "dtype": "float16",
           "model_bytes": model_bytes(case, T)}
    if ncu is None:
        return {**row, "status": "unavailable: ncu is not on the PATH"}
    if blocked is not None:
        return {**row, "status": blocked}
    command = [ncu, "--csv", "--print-units", "base", "--clock-control", "none", "--nvtx",
               "--nvtx-include", "measure/", "--metrics", ",".join(METRICS),
               sys.executable, "-m", "inferlab.measurement.ncu", "case", case, "--tokens", str(T)]
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
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferlab.measurement.ncu", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="every case under ncu -> a CSV of DRAM bytes")
    run.add_argument("--tokens", type=int, default=4096)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--timeout-s", type=float, default=25.0, help="per case")
    one = sub.add_parser("case", help="(inside ncu) run one case in the NVTX range measure")
    one.add_argument("case", choices=CASES)
    one.add_argument("--tokens", type=int, default=4096)
    args = parser.parse_args(argv)
    if args.command == "case":
        _run_case(args.case, args.tokens)
        return 0
    rows, blocked = [], sandbox.ncu_blocked(sandbox.this_machine())
    for case in CASES:  # written after each case: a step stopped at its limit keeps them
        rows.append(measure(case, args.tokens, shutil.which("ncu"), args.timeout_s, blocked))
        write_rows(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
