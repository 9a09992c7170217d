"""Does one more run change a verdict? The claims of a machine judged on its latest k runs
and on its latest k + 1, k + 2, ... (``series.max_runs``), each derived afresh in a
scratch clone of HEAD (series, traffic, claims), so this checkout's files are untouched.
Prints every claim whose verdict differs from the k-run one, and the totals.

    .venv/bin/python benchmarks/verdict_stability.py --key cpu-amd-epyc-avx512bf16-2c \
        --runs 3 4 5 6
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOVES = {("reproduced", "not reproduced"), ("not reproduced", "reproduced")}


def verdicts(key: str, runs: int, scratch: Path, configfiles: list[str]) -> dict[str, str]:
    """The claims of ``key`` over its latest ``runs`` committed runs, derived in a clone of
    the repository's HEAD whose config.yaml pools that many (a clone, so that config is the
    book's there and the results key stays ``key``: an override would make a custom grid)."""
    root = scratch / f"runs-{runs}"  # a clone: the register's runs are anchored by its
    subprocess.run(["git", "clone", "-q", str(ROOT), str(root)], check=True)  # commits
    config = (ROOT / "config.yaml").read_text(encoding="utf-8")
    if len(re.findall(r"(?m)^  max_runs: \d+$", config)) != 1:
        raise SystemExit("config.yaml has no one 'series: max_runs:' line to change")
    (root / "config.yaml").write_text(re.sub(r"(?m)^  max_runs: \d+$", f"  max_runs: {runs}",
                                             config), encoding="utf-8")
    extra = [a for f in configfiles for a in ("--configfile", f)]
    for stage in ("series", "traffic", "claims"):
        done = subprocess.run([sys.executable, "-m", "inferlab", "stage", stage,
                               "--machine", key, *extra],
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{stage} with max_runs={runs} failed:\n{done.stderr[-2000:]}")
    with open(root / "results" / key / "series.csv", newline="", encoding="utf-8") as f:
        pooled = sorted({int(r["runs"]) for r in csv.DictReader(f)
                         if r["runs"] and int(r["runs"]) > 1})
    print(f"max_runs {runs}: the series' points rest on {pooled} runs", flush=True)
    claims = json.loads((root / "results" / key / "claims.json").read_text())
    return {c["id"]: c["verdict"] for c in claims["claims"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--key", required=True)
    ap.add_argument("--runs", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--configfile", action="append", default=[])
    args = ap.parse_args(argv)
    if not (ROOT / "evidence" / args.key / "register.jsonl").is_file():
        keys = sorted(p.name for p in (ROOT / "evidence").iterdir() if p.is_dir())
        ap.error(f"no evidence/{args.key}/register.jsonl: this checkout holds no series of "
                 f"{args.key!r} (keys: {', '.join(keys)})")
    if len(args.runs) < 2 or min(args.runs) < 1:
        ap.error(f"--runs {args.runs}: give the base run count and at least one more, each >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        found = {k: verdicts(args.key, k, Path(tmp), args.configfile) for k in args.runs}
    base = args.runs[0]
    for k in args.runs:
        print(f"{k} runs: {dict(collections.Counter(found[k].values()))}")
    for k in args.runs[1:]:
        changed = [(cid, found[base][cid], found[k].get(cid)) for cid in found[base]
                   if found[k].get(cid) != found[base][cid]]
        flips = [c for c in changed if (c[1], c[2]) in MOVES]
        print(f"{base} -> {k} runs: {len(changed)} verdict(s) changed, {len(flips)} between "
              "reproduced and not reproduced")
        for cid, a, b in changed:
            print(f"  {cid}: {a} -> {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
