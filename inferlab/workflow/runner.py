"""Runs one stage end to end: the process settled, its inputs read and checked
(``register.read_input``), ``run(Params.from_config(config), ctx)``, the artifact encoded
and written (``register.write_artifact``), the log to stderr and the rule's log file.

Two entry points take the same path, so an artifact does not depend on which ran it:
``from_snakemake`` (``scripts/run_stage.py``, the rule's paths, threads and params) and
``cli_stage`` (``python -m inferlab stage NAME``, built from the config as the Snakefile does).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import atomic_write, relative
from inferlab.core.pipeline import bookkeeping_files, code_files, stage
from inferlab.evidence import artifacts
from inferlab.evidence.loading import nonfinite_cells
from inferlab.evidence.register import Evidence, read_input, write_artifact
from inferlab.measurement import machine_load
from inferlab.measurement.environment import fingerprint, hardware, host_device
from inferlab.measurement.process import seed_and_threads, steady_process
from inferlab.workflow.config import load_config, resolve, resolve_threads

__all__ = ["Job", "StageContext", "cli_stage", "from_snakemake", "read_input", "run_job",
           "steady_process"]


class Log:
    """Each line to stderr and to the rule's log file, there after the seconds since it
    opened (a log brought back from another machine says where a stage's time went)."""

    def __init__(self, path: Path | None):
        self._file, self._opened = None, time.monotonic()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def __call__(self, line: str, echo: bool = True) -> None:
        if echo:
            print(line, file=sys.stderr, flush=True)
        if self._file:
            try:
                self._file.write(f"[{time.monotonic() - self._opened:7.1f}s] {line}\n")
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


def hold_before_write(stage: str, environ: dict | None = None) -> None:
    """With ``INFERLAB_HOLD=<stage>:<file>``, stage ``<stage>`` creates ``<file>`` once it
    has computed its artifact, before anything is written, and sleeps until a signal ends
    it: the tests of interruption's defined point (a signal sent at a random moment raced
    the stage's end)."""
    value = (os.environ if environ is None else environ).get("INFERLAB_HOLD", "")
    name, sep, marker = value.partition(":")
    if not sep or name != stage:
        return
    if not marker:
        raise ValueError(f"INFERLAB_HOLD={value!r}: give <stage>:<file>, the file to create "
                         "once the stage is held")
    Path(marker).write_text(f"{os.getpid()}\n", encoding="utf-8")
    while True:  # a signal ends it: Ctrl-C raises KeyboardInterrupt, SIGKILL kills
        time.sleep(60)


@dataclass(frozen=True)
class StageContext:
    """What a stage may know beyond its params."""

    stage: str
    root: Path
    key: str                  # results key: machine, or machine@grid
    device: str
    threads: int
    seed: int
    evidence: dict[str, Evidence] = field(default_factory=dict)  # upstream stage -> artifact
    log: Callable[[str], None] = print
    # a time.time() after which a timing stage times nothing more (a step limit), or None
    stop_at: float | None = None

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
    limit_s: float | None = None  # a timing stage stops timing after this many seconds


def measured_here(key: str, evidence: dict[str, Evidence], here_env: dict) -> None:
    """A timing stage's timed inputs (probe's ceilings and launch floor) must have been
    measured on this hardware: under another host's id, prefill once used that host's
    probe.json without a word (issue 35, item 5)."""
    here = {k: v for k, v in hardware(here_env).items() if k != "threads"}
    for name, found in evidence.items():
        if not stage(name).timed or found.entry is None:
            continue
        there = {k: v for k, v in hardware(found.entry["provenance"].get("environment")
                                            or {}).items() if k != "threads"}
        if there != here:
            raise ValueError(
                f"results/{key}/{found.path.name} was measured on other hardware ({there}) "
                f"than this machine ({here}): a timing stage computes with its numbers, so "
                f"they must be this machine's. Run the {name!r} stage here first (snakemake "
                f"--forcerun {name}), or leave out --config machine=... so this machine's "
                "own id is used")


def same_device(key: str, device: str, evidence: dict[str, Evidence]) -> None:
    """A stage computes for the device its inputs were computed for: derived on a CPU host
    for a GPU's key without the GPU's config, the series and the claims once took the
    CPU's blocks and fp16's CPU stand-in, silently."""
    for found in evidence.values():
        there = ((found.entry or {}).get("provenance", {}).get("config") or {}).get("device")
        if there is not None and there != device:
            raise ValueError(
                f"results/{key}/{found.path.name} was computed for device {there!r}; this "
                f"run's config says {device!r}: a stage computes for the device its inputs "
                f"were made for. For another machine's key give its device (device: {there}: "
                "for a GPU's, --configfile profiles/book.yaml)")


def run_job(job: Job, log: Callable[[str], None] = print) -> dict:
    """Run the stage of ``job`` and write its artifact; return its entry. Nothing is
    written before its output passed its schema: a failing stage leaves no artifact."""
    process = steady_process()  # before torch is imported
    declared = stage(job.stage)
    if job.output.resolve() != layout.artifact_path(job.root, job.key, job.stage).resolve():
        raise ValueError(f"stage {job.stage!r} was asked to write {job.output}, but the "
                         f"register tracks {layout.artifact_path(job.root, job.key, job.stage)}")
    module = importlib.import_module(declared.module)
    # a bad config or claims file is named first, as it is, never blamed on the inputs
    params = module.Params.from_config(job.config)
    evidence = {name: read_input(job.root, job.key, name, job.inputs[name])
                for name in declared.reads}
    same_device(job.key, job.config["device"], evidence)
    if declared.timed:
        measured_here(job.key, evidence, fingerprint(job.config["device"], collect_env=False))
    stop_at = None if job.limit_s is None else time.time() + job.limit_s
    ctx = StageContext(job.stage, job.root, job.key, job.config["device"], job.threads,
                       job.config["seed"], evidence, log, stop_at)
    seed_and_threads(job.threads, job.config["seed"])
    started = time.perf_counter()
    from inferlab.measurement.workers import stopping  # after steady_process: loads torch

    load_before = machine_load.snapshot()
    try:
        with stopping() if declared.timed else contextlib.nullcontext():
            content = artifacts.encode(job.stage, module.run(params, ctx))
    except ValueError as exc:
        cells = nonfinite_cells(evidence.values(), job.root)
        if not cells:
            raise
        raise ValueError(f"stage {job.stage} failed: {exc}; its inputs hold values that are "
                         f"not finite, the likely cause: {'; '.join(cells)}") from exc
    hold_before_write(job.stage)  # a test's defined point to interrupt
    entry = write_artifact(
        job.root, job.key, job.stage, content, config=job.config,
        code_files=[job.root / f for f in code_files(job.stage)],
        bookkeeping_files=[job.root / f for f in bookkeeping_files(job.stage)],
        inputs=list(job.inputs.values()), seed=job.config["seed"], command=job.command,
        environment={**fingerprint(ctx.device if declared.needs_device
                                   else host_device(ctx.device), collect_env=False),
                     "process": process,
                     "load": machine_load.during(load_before)})
    write_derived(job.root, job.key, job.stage, module, content)
    version = "" if entry["version"] is None else f" (version {entry['version']})"
    log(f"[{job.stage}] wrote {relative(job.output, job.root)}{version} "
        f"in {time.perf_counter() - started:.1f} s with {job.threads} thread(s)")
    return entry


def write_derived(root: Path, key: str, stage_name: str, module, content: bytes) -> None:
    """The files a stage declares as ``derived``, made from its artifact as registered."""
    declared = stage(stage_name)
    if not declared.derived:
        return
    files = module.derived_files(artifacts.decode(stage_name, content))
    if sorted(files) != sorted(declared.derived):
        raise ValueError(f"stage {stage_name!r} derived {sorted(files)}, but its declaration "
                         f"lists {sorted(declared.derived)}")
    for name, data in files.items():
        atomic_write(layout.derived_path(root, key, stage_name, name), data)


def run_logged(job: Job) -> dict:
    log = Log(job.log_file)
    try:
        return run_job(job, log=log)
    except ValueError:  # a refusal that names its cause: its traceback to the log file
        log(traceback.format_exc().rstrip(), echo=False)  # only, the message to the user
        raise  # once (R8-18: it came after a full traceback)
    except BaseException:
        log(traceback.format_exc().rstrip())
        raise
    finally:
        log.close()


def from_snakemake(smk) -> dict:
    """Entry point of scripts/run_stage.py: the rule is the stage, and gives the paths,
    threads and effective config."""
    job = Job(stage=smk.rule, root=Path.cwd(), key=smk.params.key, config=dict(smk.params.config),
              inputs={name: Path(smk.input[name]) for name in stage(smk.rule).reads},
              output=Path(smk.output.artifact), threads=int(smk.threads),
              command=smk.params.command, log_file=Path(smk.log[0]))
    return run_logged(job)


def cli_stage(name: str, root: Path | str, machine: str | None, configfiles=(),
              overrides=(), limit_s: float | None = None) -> int:
    """``python -m inferlab stage NAME``: the same stage without Snakemake."""
    root = Path(root)
    declared = stage(name)
    raw = load_config(configfiles, overrides, base=root / "config.yaml")
    config = resolve(raw, machine=machine, check_device=declared.needs_device)
    command = ["python", "-m", "inferlab", "stage", name, "--machine", config.machine,
               *(["--limit-s", f"{limit_s:g}"] if limit_s is not None else [])]
    for path in configfiles:
        command += ["--configfile", str(path)]
    for text in overrides:
        command += ["--set", text]
    job = Job(stage=name, root=root, key=config.key, config=config.effective(name),
              inputs={up: layout.artifact_path(root, config.key, up)
                      for up in stage(name).reads},
              output=layout.artifact_path(root, config.key, name), threads=resolve_threads(raw),
              command=shlex.join(command), log_file=layout.log_path(root, config.key, name),
              limit_s=limit_s)
    run_logged(job)
    return 0
