"""Runs one stage end to end: typed params -> ``inferlab.stages.<stage>.run`` -> artifact
bytes -> schema check -> ``provenance.write_artifact`` (results/, retained copy, register).

The same path serves Snakemake (``scripts/run_stage.py`` -> ``run_from_snakemake``) and
the command line without Snakemake (``python -m inferlab stage NAME`` -> ``cli_stage``),
so an artifact does not depend on which of the two ran it.

``STAGE_CODE`` is the one table of which files a stage's numbers come from. The Snakemake
rules take it as ``input.code`` (Snakemake does not track what a script imports), and the
provenance hashes it as ``code_sha256``. It lists the stage module and the library
modules it computes with; the plumbing that only stores results (this module, config,
provenance, register, layout, cli) is left out on purpose, so that changing how results
are stored does not rerun measurements. ``tests/test_stages.py`` checks that the table
covers every ``inferlab`` module each stage module imports.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from inferlab import layout
from inferlab.config import REPO_ROOT, Config, load_config, params_dict, resolve

SCHEMA_DIR = REPO_ROOT / "schemas"

_STAGES = "inferlab/stages/__init__.py"  # the helpers every stage imports
STAGE_CODE: dict[str, tuple[str, ...]] = {
    "probe": (_STAGES, "inferlab/stages/probe.py", "inferlab/backends.py",
              "inferlab/environment.py", "inferlab/measure.py"),
    "correctness": (_STAGES, "inferlab/stages/correctness.py", "inferlab/attention.py",
                    "inferlab/traffic.py"),
    "prefill": (_STAGES, "inferlab/stages/prefill.py", "inferlab/attention.py",
                "inferlab/backends.py", "inferlab/measure.py"),
    "decode": (_STAGES, "inferlab/stages/decode.py", "inferlab/stages/prefill.py",
               "inferlab/attention.py", "inferlab/backends.py", "inferlab/measure.py",
               "inferlab/traffic.py"),
    "traffic": (_STAGES, "inferlab/stages/traffic.py", "inferlab/traffic.py",
                "inferlab/backends.py"),
    "claims": (_STAGES, "inferlab/stages/claims.py", "inferlab/claims.py", "claims.yaml"),
    "report": ("inferlab/report.py", "inferlab/claims.py", "claims.yaml"),
}
# claims.schema.json describes claims.yaml; the claims.json artifact has its own schema
ARTIFACT_SCHEMAS = {stage: f"{stage}.schema.json" for stage in layout.STAGES} | {
    "claims": "claims_result.schema.json"}

# stage -> the stages whose artifacts it reads (ctx.inputs); Snakemake's rules take the
# same paths as inputs through ``upstream_artifacts``.
STAGE_INPUTS: dict[str, tuple[str, ...]] = {
    "probe": (),
    "correctness": (),
    "prefill": ("probe",),
    "decode": ("probe",),
    "traffic": ("prefill",),
    "claims": ("probe", "correctness", "prefill", "decode", "traffic"),
}


# --------------------------------------------------------------------------- Snakefile helpers


def stage_code_files(stage: str) -> list[str]:
    """The code files of ``stage`` (or "report"), relative to the repository root."""
    if stage not in STAGE_CODE:
        raise ValueError(f"stage={stage!r} has no code table; expected one of {list(STAGE_CODE)}")
    return list(STAGE_CODE[stage])


def upstream_artifacts(stage: str, machine: str) -> dict[str, str]:
    """{upstream stage: its artifact path} for ``stage``'s rule inputs (relative paths)."""
    return {up: layout.artifact_path(".", machine, up).as_posix()
            for up in STAGE_INPUTS[layout.check_stage(stage)]}


def stage_config(raw: dict, stage: str) -> dict:
    """The config sections ``stage`` reads: the rule's params, so a change there reruns it.

    Both device blocks are included (the device is resolved at run time): editing the
    cuda block also reruns a CPU stage, which errs on the side of rerunning.
    """
    sections = {"probe": ("probe", "prefill", "timing"), "correctness": ("correctness",),
                "prefill": ("prefill", "timing"), "decode": ("decode", "timing"),
                "traffic": ("traffic",), "claims": ()}[layout.check_stage(stage)]
    common = {k: raw[k] for k in ("device", "threads", "seed")}
    return {**common, **{k: raw[k] for k in sections}}


def reproduce_command(stage: str, machine: str, config_settings=None) -> str:
    """The Snakemake command that reruns ``stage`` alone with this run's config."""
    parts = ["snakemake", "--cores", "1", "--forcerun", stage, stage]
    for path in getattr(config_settings, "configfiles", None) or ():
        parts += ["--configfile", _relative(path)]
    overrides = dict(getattr(config_settings, "config", None) or {})
    overrides["machine"] = machine
    parts += ["--config", *(f"{k}={_yaml_value(v)}" for k, v in sorted(overrides.items()))]
    return shlex.join(parts)


def _yaml_value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _relative(path) -> str:
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def report_machines(machine: str, root: Path | str = ".") -> list[str]:
    """Machines whose claims.json the report takes: this one (its claims rule makes it) and
    every other machine that has one (a folder with only some stages is not ready)."""
    ready = {m for m in layout.machines(root) if layout.artifact_path(root, m, "claims").is_file()}
    return sorted(ready | {layout.check_machine(machine)})


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class StageContext:
    """What a stage may know beyond its params: where it runs and what it reads."""

    stage: str
    root: Path
    machine: str
    device: str
    threads: int
    seed: int
    inputs: dict[str, Path] = field(default_factory=dict)   # upstream stage -> artifact
    log: Callable[[str], None] = print

    def progress(self, i: int, n: int, what: str) -> None:
        """'[prefill] 7/24 naive T=2048 float32 causal' to stderr and the stage's log."""
        self.log(f"[{self.stage}] {i}/{n} {what}")


class _Log:
    """Lines to stderr and, when given, appended to a log file (flushed, for `tail -f`)."""

    def __init__(self, path: Path | None):
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def __call__(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if self._file:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()


def serialise(stage: str, result) -> bytes:
    """A stage's DataFrame as CSV (contract column order) or its dict as JSON text."""
    import pandas as pd

    if isinstance(result, pd.DataFrame):
        columns = artifact_schema(stage)["required"]
        missing, extra = set(columns) - set(result.columns), set(result.columns) - set(columns)
        if missing or extra:
            raise ValueError(f"stage {stage!r} returned columns missing {sorted(missing)} "
                             f"and extra {sorted(extra)}; docs/contracts.md lists {columns}")
        return result[columns].to_csv(index=False, lineterminator="\n").encode("utf-8")
    if isinstance(result, dict):
        return (json.dumps(result, indent=2, allow_nan=False) + "\n").encode("utf-8")
    raise ValueError(f"stage {stage!r} returned {type(result).__name__}; expected a "
                     "pandas DataFrame or a dict")


def artifact_schema(stage: str) -> dict:
    return json.loads((SCHEMA_DIR / ARTIFACT_SCHEMAS[layout.check_stage(stage)]).read_text())


def artifact_records(stage: str, content: bytes) -> list:
    """The artifact as read back (CSV rows via pandas.read_csv, NaN -> None) or JSON."""
    if layout.ARTIFACTS[stage].endswith(".json"):
        return [json.loads(content)]
    import pandas as pd

    frame = pd.read_csv(io.BytesIO(content))
    return json.loads(frame.to_json(orient="records"))


def validate_artifact(stage: str, content: bytes) -> None:
    """ValueError naming the row and column when the artifact breaks its schema."""
    validator = jsonschema.Draft202012Validator(artifact_schema(stage))
    for i, record in enumerate(artifact_records(stage, content)):
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "(top level)"
            raise ValueError(f"{layout.ARTIFACTS[stage]} row {i}, {where}: {error.message} "
                             f"(schemas/{ARTIFACT_SCHEMAS[stage]})")


def _stage_inputs(root: Path, machine: str, stage: str) -> dict[str, Path]:
    inputs = {up: layout.artifact_path(root, machine, up) for up in STAGE_INPUTS[stage]}
    for up, path in inputs.items():
        if not path.is_file():
            raise ValueError(f"stage {stage!r} reads {path}, which does not exist: run the "
                             f"{up!r} stage for machine {machine!r} first")
    return inputs


def run_stage(stage: str, config: Config, root: Path | str, machine: str, command: str,
              log: Callable[[str], None] = print) -> dict:
    """Run ``stage`` for ``machine`` and write its artifact; return the register entry.

    Nothing is written before the stage has finished and its output passed its schema,
    so an interrupted or failing stage leaves no artifact and no register entry.
    """
    import torch

    from inferlab.environment import fingerprint
    from inferlab.provenance import write_artifact

    root = Path(root)
    params = config.stage_params(stage)
    ctx = StageContext(stage, root, layout.check_machine(machine), config.device,
                       config.threads, config.seed, _stage_inputs(root, machine, stage), log)
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    started = time.perf_counter()
    module = importlib.import_module(f"inferlab.stages.{stage}")
    content = serialise(stage, module.run(params, ctx))
    validate_artifact(stage, content)
    entry = write_artifact(
        root, machine, stage, content, config=params_dict(params),
        code_files=[root / f for f in STAGE_CODE[stage]], inputs=list(ctx.inputs.values()),
        seed=config.seed, command=command,
        environment=fingerprint(config.device, collect_env=False))
    log(f"[{stage}] wrote {entry['path']} (version {entry['version']}) in "
        f"{time.perf_counter() - started:.1f} s")
    return entry


def _run_logged(stage: str, config: Config, root: Path, command: str, path: Path) -> dict:
    log = _Log(path)
    try:
        return run_stage(stage, config, root, config.machine, command, log=log)
    except BaseException:
        log(traceback.format_exc().rstrip())
        raise
    finally:
        log.close()


def run_from_snakemake(smk) -> dict:
    """Entry point of scripts/run_stage.py: the rule name is the stage name."""
    root = Path.cwd()
    config = resolve(dict(smk.config), machine=smk.params.machine)
    expected = layout.artifact_path(root, config.machine, smk.rule).resolve()
    if Path(smk.output.artifact).resolve() != expected:
        raise ValueError(f"rule {smk.rule!r} declares output {smk.output.artifact}, but the "
                         f"stage writes {expected}; the rule and inferlab.layout disagree")
    return _run_logged(smk.rule, config, root, smk.params.command, Path(smk.log[0]))


def report_from_snakemake(smk) -> Path:
    """Entry point of scripts/report.py: report/index.html from every machine's results."""
    from inferlab.report import render_report

    log = _Log(Path(smk.log[0]))
    try:
        html = render_report(Path.cwd(), Path(smk.output.html).parent)
        log(f"[report] wrote {html}")
        return html
    except BaseException:
        log(traceback.format_exc().rstrip())
        raise
    finally:
        log.close()


def cli_stage(stage: str, root: Path | str, machine: str | None, configfiles=(),
              overrides=()) -> int:
    """``python -m inferlab stage NAME``: the same stage without Snakemake."""
    root = Path(root)
    layout.check_stage(stage)
    raw = load_config(configfiles, overrides, base=root / "config.yaml")
    config = resolve(raw, machine=machine)
    command = ["python", "-m", "inferlab", "stage", stage, "--machine", config.machine]
    for path in configfiles:
        command += ["--configfile", str(path)]
    for text in overrides:
        command += ["--set", text]
    _run_logged(stage, config, root, shlex.join(command),
                layout.log_path(root, config.machine, stage))
    return 0


# --------------------------------------------------------------------------- adopting


def _adoption_verdict(root: Path, machine: str, stage: str, config: Config) -> str | None:
    """None if the committed artifact of ``stage`` is current, else why it must rerun."""
    from inferlab.provenance import code_hash, config_hash, sha256_file
    from inferlab.register import Register

    path = layout.artifact_path(root, machine, stage)
    entry = Register(root, machine).latest(stage)
    if entry is None or not path.is_file():
        return "no artifact or no register entry"
    if sha256_file(path) != entry["sha256"]:
        return f"{entry['path']} differs from its latest register entry (edited?)"
    if code_hash([root / f for f in STAGE_CODE[stage]], root) != entry["provenance"]["code_sha256"]:
        return "its code changed since it was made"
    if config_hash(params_dict(config.stage_params(stage))) != entry["provenance"]["config_sha256"]:
        return "its effective config changed since it was made"
    return None


def cli_adopt(root: Path | str, machine: str) -> int:
    """Let Snakemake treat committed, still-valid results of ``machine`` as up to date.

    A fresh clone has no ``.snakemake/`` metadata and checkout mtimes in no useful order.
    Each stage (in DAG order) whose artifact matches its latest register entry and whose
    code and config hashes equal the current ones gets an mtime newer than its inputs;
    any other stage (and all downstream of it) gets an old mtime, so that it reruns.
    """
    root = Path(root)
    if (root / ".snakemake" / "metadata").is_dir():
        print("adopt: .snakemake/metadata exists; Snakemake already tracks these results")
        return 0
    config = resolve(load_config(base=root / "config.yaml"), machine=machine)
    now, rerun = time.time(), set()
    for i, stage in enumerate(layout.STAGES):
        path = layout.artifact_path(root, machine, stage)
        stale_up = sorted(rerun & set(STAGE_INPUTS[stage]))
        why = (f"upstream {', '.join(stale_up)} reruns" if stale_up
               else _adoption_verdict(root, machine, stage, config))
        stamp = now + i if why is None else 0
        for p in (path, layout.sidecar_path(path)):
            if p.is_file():
                os.utime(p, (stamp, stamp))
        if why is not None:
            rerun.add(stage)
        print(f"adopt: {stage}: " + ("adopted (current)" if why is None else f"will rerun: {why}"))
    return 0
