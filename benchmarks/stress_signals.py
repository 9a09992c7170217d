"""The suite's timing and signal tests, run many times under load: do any of them race?

A test that depends on who wins a race fails CI at random: on a loaded AVX2 host the smoke
run once finished before the test's Ctrl-C landed (issue 35). This runs every test that
involves timing or signals ``--rounds`` times (default 20), each round in one fresh pytest
process, with one busy process spinning on the other core the whole time (pinned there,
the tests pinned to the rest), and reports per test how often it failed (the goal: never).

Which tests is found, not listed: every test function in tests/ whose own source sends
or waits for a signal, sleeps, starts a thread or a process it interrupts, or reads a
clock (``SIGNS``), and every test of the files and names ``tests/conftest.py`` marks
``serial`` (they hold wall-clock bounds: the timing harness). The Slurm tests need a local
cluster and are left out unless ``--slurm``.

    nice .venv/bin/python benchmarks/stress_signals.py --list      # which tests
    nice .venv/bin/python benchmarks/stress_signals.py             # 20 rounds under load
    nice .venv/bin/python benchmarks/stress_signals.py --rounds 3 --no-load

Exit status 0 when no test failed in any round, 1 otherwise (a round that could not run
at all counts as a failure of every test in it). Started in the background (``cmd &`` in a
script), every process under it inherits SIGINT ignored, as a CI job may: the first run
found the Ctrl-C test relying on a terminal's SIGINT (it held for ever), which it no
longer does.
"""

from __future__ import annotations

import argparse
import ast
import multiprocessing
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# what a test's own source uses when it times, sleeps, signals or races a process
SIGNS = ("signal.", "SIGINT", "SIGTERM", "SIGKILL", "time.sleep", "threading.", "Thread(",
         "perf_counter", "monotonic", "Popen", "send_signal", "killpg", "multiprocessing")


def _serial_marks() -> tuple[set[str], set[str]]:
    """conftest's SERIAL_FILES and SERIAL_TESTS, read from its source (not imported)."""
    found: dict[str, set[str]] = {"SERIAL_FILES": set(), "SERIAL_TESTS": set()}
    for node in ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in found:
            found[node.targets[0].id] = set(ast.literal_eval(node.value))
    return found["SERIAL_FILES"], found["SERIAL_TESTS"]


def selected(slurm: bool = False) -> list[str]:
    """pytest node ids (file::function) of every test that involves timing or signals."""
    serial_files, serial_tests = _serial_marks()
    ids = []
    for path in sorted(TESTS.glob("test_*.py")):
        if "slurm" in path.name and not slurm:
            continue
        source = path.read_text(encoding="utf-8")
        functions = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
        bodies = {n.name: ast.get_source_segment(source, n) or "" for n in functions}
        # a helper of the file that signals or sleeps (a worker that kills itself, a wait
        # for a held stage) counts for the tests that name it, even in a string
        fixtures = {n.name for n in functions if n.decorator_list}  # fixtures are no helpers
        helpers = [re.compile(rf"\b{name}\b") for name, body in bodies.items()
                   if not name.startswith("test_") and name not in fixtures
                   and any(sign in body for sign in SIGNS)]
        for name, body in bodies.items():
            if name.startswith("test_") and (
                    path.name in serial_files or name in serial_tests
                    or any(sign in body for sign in SIGNS)
                    or any(helper.search(body) for helper in helpers)):
                ids.append(f"{path.relative_to(ROOT).as_posix()}::{name}")
    return ids


def _spin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    while True:
        pass


def _cpus() -> tuple[int | None, set[int] | None]:
    """(the busy process's CPU, the tests' CPUs): the last CPU this process may use, and
    the others; (None, None) where there is one CPU or no affinity (off Linux)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    return (cpus[-1], set(cpus[:-1])) if len(cpus) > 1 else (None, None)


def one_round(ids: list[str], report: Path, tests_cpus: set[int] | None,
              timeout_s: float) -> dict[str, str]:
    """Run ``ids`` once in a fresh pytest; {node id: "passed" | "failed" | "skipped"}."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", *ids]
    preexec = (lambda: os.sched_setaffinity(0, tests_cpus)) if tests_cpus else None
    try:
        subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                       preexec_fn=preexec, check=False)
    except subprocess.TimeoutExpired:
        return dict.fromkeys(ids, "failed")
    if not report.is_file():
        return dict.fromkeys(ids, "failed")
    outcome = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").split("[")[0]
        node = f"{case.get('classname', '').replace('.', '/')}.py::{name}"
        state = "failed" if case.find("failure") is not None or case.find("error") is not None \
            else "skipped" if case.find("skipped") is not None else "passed"
        if outcome.get(node) != "failed":  # a parametrized test fails if any case does
            outcome[node] = state
    return {i: outcome.get(i, "failed") for i in ids}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--list", action="store_true", help="print the tests and stop")
    p.add_argument("--no-load", action="store_true", help="no busy process beside the tests")
    p.add_argument("--slurm", action="store_true", help="the Slurm tests too (a local cluster)")
    p.add_argument("--round-timeout-s", type=float, default=3600)
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: must be at least 1")
    ids = selected(args.slurm)
    if args.list:
        print("\n".join(ids))
        return 0
    busy_cpu, tests_cpus = _cpus()
    busy = None
    if not args.no_load:
        busy = multiprocessing.Process(target=_spin, args=(busy_cpu,), daemon=True)
        busy.start()
    failures, skips = Counter(), Counter()
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        for i in range(1, args.rounds + 1):
            result = one_round(ids, out / "stress-round.xml", tests_cpus, args.round_timeout_s)
            failures.update(t for t, state in result.items() if state == "failed")
            skips.update(t for t, state in result.items() if state == "skipped")
            print(f"round {i}/{args.rounds}: {sum(s == 'failed' for s in result.values())} "
                  f"failed of {len(ids)} ({time.monotonic() - started:.0f} s; load average "
                  f"{os.getloadavg()[0]:.2f})", flush=True)
    finally:
        if busy is not None:
            busy.terminate()
    print(f"\n{len(ids)} tests x {args.rounds} rounds" + ("" if args.no_load else
          f", one busy process on CPU {busy_cpu}") + f": {sum(failures.values())} failures")
    for test in ids:
        if failures[test] or skips[test]:
            print(f"  {failures[test]:>3} failed, {skips[test]:>3} skipped  {test}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
