"""Runs one stage end to end: its inputs read and checked against the register ->
``Params.from_config`` -> ``run(params, ctx)`` -> the artifact's bytes (``artifacts``) ->
``provenance.write_artifact`` (results/, retained copies, register entry).

Two entry points take the same path, so an artifact does not depend on which ran it:
``from_snakemake`` (``scripts/run_stage.py``), which uses the paths, threads and params
the rule hands it, and ``cli_stage`` (``python -m inferlab stage NAME``), which builds
them from the config the way the Snakefile does.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inferlab import artifacts, layout
from inferlab.config import load_config, resolve, resolve_threads
from inferlab.evidence import Evidence
from inferlab.files import relative, sha256_file
from inferlab.pipeline import code_files, stage
from inferlab.register import Register
from inferlab.trust import doubt


@dataclass(frozen=True)
class StageContext:
    """What a stage may know beyond its params: where it runs and what it reads."""

    stage: str
    root: Path
    key: str                  # results key: machine, or machine@grid
    device: str
    threads: int
    seed: int
    evidence: dict[str, Evidence] = field(default_factory=dict)  # upstream stage -> artifact
    log: Callable[[str], None] = print

    @property
    def inputs(self) -> dict:
        """upstream stage -> its artifact as read (a Table, or probe.json's dict)."""
        return {name: e.data for name, e in self.evidence.items()}

    def progress(self, i: int, n: int, what: str) -> None:
        """'[prefill] 7/24 naive T=2048 float32 causal' to stderr and the stage's log."""
        self.log(f"[{self.stage}] {i}/{n} {what}")


@dataclass(frozen=True)
class Job:
    """One stage to run, as Snakemake's rule or the command line describes it."""

    stage: str
    root: Path
    key: str
    config: dict              # the stage's effective config (config.effective_config)
    inputs: dict[str, Path]   # upstream stage -> its artifact
    output: Path
    threads: int
    command: str
    log_file: Path | None = None


class _Log:
    """Lines to stderr and, when given, to a log file (flushed, for `tail -f`)."""

    def __init__(self, path: Path | None):
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def __call__(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if self._file:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as exc:  # a full disk must not hide the stage's own error
                print(f"(log file {self._file.name} not written further: {exc})",
                      file=sys.stderr, flush=True)
                self.close()

    def close(self) -> None:
        file, self._file = self._file, None
        if file:
            with contextlib.suppress(OSError):
                file.close()


def read_input(root: Path, key: str, name: str, path: Path) -> Evidence:
    """An upstream artifact, trusted only after ``trust.doubt`` finds nothing: the
    register's chain and anchor intact, and this file and its sidecar its latest
    version; else a ValueError saying what is wrong and what to rerun."""
    if not path.is_file():
        raise ValueError(f"stage input {relative(path, root)} does not exist: run the {name!r} "
                         f"stage for {key!r} first")
    if path.resolve() != layout.artifact_path(root, key, name).resolve():
        raise ValueError(f"stage input {path} is not where the register of {key!r} keeps "
                         f"{name}: {layout.artifact_path(root, key, name)}")
    why = doubt(root, key, name)
    if why is not None:
        raise ValueError(f"stage input {relative(path, root)} cannot be trusted: {why}. "
                         f"Refusing to compute from it; rerun the {name!r} stage (e.g. "
                         f"snakemake --forcerun {name}), or run `inferlab verify` to see more")
    entry = Register(root, key).latest(name)
    return Evidence(name, path, artifacts.read(path, name), entry, sha256_file(path))


def nonfinite_cells(evidence, root: Path, most: int = 5) -> list[str]:
    """'results/k/prefill.csv line 3 (impl=naive, fused_sdpa=False, T=64): median_ms=inf'
    for the first ``most`` non-finite number cells of the tables in ``evidence``."""
    found = []
    for item in evidence:
        if not isinstance(item.data, artifacts.Table):
            continue
        frame, marks = item.data.frame, item.data.nonfinite
        for i, column in zip(*marks.to_numpy().nonzero(), strict=True):
            row = frame.iloc[i]
            name = marks.columns[column]
            label = ", ".join(f"{c}={row[c]}" for c in frame.columns[:3])
            found.append(f"{relative(item.path, root)} line {i + 2} ({label}): "
                         f"{name}={row[name]}")
    return found[:most]


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_NEVER, _TOP_PAD = -1, 256 << 20  # -1: never trim, mallopt(3) (2**31 - 1 would be 2 GiB)


def steady_process() -> dict:
    """Keep one run's timings like the next's (benchmarks/bimodal.py found the causes):

    * glibc serves a buffer above its mmap threshold with fresh pages and returns them on
      free, and trims the heap top; whether a call's score matrix then faults on every
      page depended on what ran before it, so naive attention at 256 tokens read 5 or 9 ms
      run to run (1,537 minor faults a call; none with this setting, and 1.5-1.9x faster
      at 256-2,048 tokens). No mmap, no trimming, the heap grown 256 MiB at a time:
      freed buffers stay warm, as a GPU's caching allocator keeps them. "No trimming"
      is a trim threshold of -1 (mallopt(3)): the largest positive one, 2 GiB, let glibc
      trim the heap whenever naive attention at 4,096 tokens freed its two 805 MB
      buffers, so each call faulted on 393,216 pages and took 1.1-3.1 s, not 0.75;
    * OpenMP threads that spin-wait on a shared 2-vCPU VM made two threads up to 8x
      slower than one; passive waiting (unless the caller chose) stops the spinning.

    Must run before torch loads OpenMP. Returns what was set, for the provenance.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    malloc = None
    try:
        libc = ctypes.CDLL("libc.so.6")
        if libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _NEVER) \
                and libc.mallopt(_M_TOP_PAD, _TOP_PAD):
            malloc = {"mmap_max": 0, "trim_threshold": _NEVER, "top_pad": _TOP_PAD}
    except OSError:  # not glibc: nothing to set
        pass
    return {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"], "glibc_mallopt": malloc}


def run_job(job: Job, log: Callable[[str], None] = print) -> dict:
    """Run the stage of ``job`` and write its artifact; return the register entry.

    Nothing is written before the stage has finished and its output passed its schema,
    so an interrupted or failing stage leaves no artifact and no register entry.
    """
    process = steady_process()  # before torch is imported
    import torch

    from inferlab.environment import fingerprint
    from inferlab.provenance import write_artifact

    declared = stage(job.stage)
    if job.output.resolve() != layout.artifact_path(job.root, job.key, job.stage).resolve():
        raise ValueError(f"stage {job.stage!r} was asked to write {job.output}, but the "
                         f"register tracks {layout.artifact_path(job.root, job.key, job.stage)}")
    evidence = {name: read_input(job.root, job.key, name, job.inputs[name])
                for name in declared.reads}
    ctx = StageContext(job.stage, job.root, job.key, job.config["device"], job.threads,
                       job.config["seed"], evidence, log)
    torch.set_num_threads(job.threads)
    torch.manual_seed(job.config["seed"])
    started = time.perf_counter()
    module = importlib.import_module(declared.module)
    try:
        content = artifacts.encode(job.stage, module.run(module.Params.from_config(job.config),
                                                         ctx))
    except ValueError as exc:
        cells = nonfinite_cells(evidence.values(), job.root)
        if not cells:
            raise
        raise ValueError(f"stage {job.stage} failed: {exc}; its inputs hold values that are "
                         f"not finite, the likely cause: {'; '.join(cells)}") from exc
    entry = write_artifact(
        job.root, job.key, job.stage, content, config=job.config,
        code_files=[job.root / f for f in code_files(job.stage)],
        inputs=list(job.inputs.values()), seed=job.config["seed"], command=job.command,
        environment={**fingerprint(ctx.device, collect_env=False), "process": process},
        schema_version=artifacts.schema_version(job.stage))
    log(f"[{job.stage}] wrote {entry['path']} (version {entry['version']}) in "
        f"{time.perf_counter() - started:.1f} s with {job.threads} thread(s)")
    return entry


def run_logged(job: Job) -> dict:
    log = _Log(job.log_file)
    try:
        return run_job(job, log=log)
    except BaseException:
        log(traceback.format_exc().rstrip())
        raise
    finally:
        log.close()


def from_snakemake(smk) -> dict:
    """Entry point of scripts/run_stage.py: the rule name is the stage name, and every
    path, the threads and the effective config come from the rule."""
    job = Job(stage=smk.rule, root=Path.cwd(), key=smk.params.key, config=dict(smk.params.config),
              inputs={name: Path(smk.input[name]) for name in stage(smk.rule).reads},
              output=Path(smk.output.artifact), threads=int(smk.threads),
              command=smk.params.command, log_file=Path(smk.log[0]))
    return run_logged(job)


def cli_stage(name: str, root: Path | str, machine: str | None, configfiles=(),
              overrides=()) -> int:
    """``python -m inferlab stage NAME``: the same stage without Snakemake."""
    root = Path(root)
    stage(name)
    raw = load_config(configfiles, overrides, base=root / "config.yaml")
    config = resolve(raw, machine=machine)
    command = ["python", "-m", "inferlab", "stage", name, "--machine", config.machine]
    for path in configfiles:
        command += ["--configfile", str(path)]
    for text in overrides:
        command += ["--set", text]
    job = Job(stage=name, root=root, key=config.key, config=config.effective(name),
              inputs={up: layout.artifact_path(root, config.key, up)
                      for up in stage(name).reads},
              output=layout.artifact_path(root, config.key, name), threads=resolve_threads(raw),
              command=shlex.join(command), log_file=layout.log_path(root, config.key, name))
    run_logged(job)
    return 0
