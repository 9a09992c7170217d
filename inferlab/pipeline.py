"""The pipeline's stages, declared once.

Everything that needs to know a stage reads ``STAGES``: the Snakefile's rules (inputs,
outputs, params, resources), the runner, ``inferlab adopt``, the claims checks (column
names against the artifact schema) and the report. A stage is

* a name, which is also its rule's name and its module ``inferlab.stages.<name>``
  (``Params.from_config(cfg)`` and ``run(params, ctx)``);
* its artifact file in ``results/{key}/`` and that artifact's schema in ``schemas/``;
* the stages whose artifacts it reads;
* the config sections it uses: their values for the device found, with the seed, are the
  stage's *effective config* (``inferlab.config.effective_config``), which is the
  rule's rerun trigger, the provenance's ``config_sha256`` and what adopt compares;
* extra files it reads (``claims.yaml``), which count as its code;
* whether it times anything (then it never shares the machine with another stage);
* for a table, the columns that name a row (its point), so two versions can be compared.

The code files whose change reruns a stage are not listed by hand: they are the
import closure of its module inside ``inferlab/`` (``code_files``), read from the
source with ``ast`` so this module imports neither torch nor any other stage.

This module is a leaf: it imports nothing from ``inferlab``.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


@dataclass(frozen=True)
class Stage:
    name: str
    artifact: str                  # file name in results/{key}/
    schema: str                    # file name in schemas/
    reads: tuple[str, ...] = ()    # stages whose artifacts it reads
    sections: tuple[str, ...] = ()  # config sections of its effective config
    files: tuple[str, ...] = ()    # other files it reads, relative to the repository
    timed: bool = False            # it measures time: never beside another stage
    key_columns: tuple[str, ...] = ()  # a table's columns that name a row (its point)
    derived: tuple[str, ...] = ()  # files made from the artifact, in results/{key}/{name}/

    @property
    def module(self) -> str:
        return f"inferlab.stages.{self.name}"

    @property
    def is_table(self) -> bool:
        return self.artifact.endswith(".csv")


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("probe", "probe.json", "probe.schema.json",
          sections=("probe", "timing"), timed=True),
    Stage("correctness", "correctness.csv", "correctness.schema.json",
          sections=("correctness",),
          key_columns=("check", "impl", "T", "dtype", "causal", "score_scale", "block_q",
                       "block_k", "splits")),
    Stage("prefill", "prefill.csv", "prefill.schema.json", reads=("probe",),
          sections=("prefill", "timing"), timed=True,
          key_columns=("impl", "fused_sdpa", "T", "dtype", "causal", "block_q", "block_k",
                       "batch", "heads", "d")),
    Stage("decode", "decode.csv", "decode.schema.json", reads=("probe",),
          sections=("decode", "timing"), timed=True,
          key_columns=("impl", "fused_sdpa", "cache_len", "batch", "dtype", "splits", "heads",
                       "d")),
    Stage("traffic", "traffic.csv", "traffic.schema.json", reads=("prefill",),
          sections=("traffic",),
          key_columns=("T", "d", "causal", "dtype", "tile", "block_q_model")),
    Stage("model", "model.csv", "model.schema.json", reads=("probe",),
          sections=("model",), key_columns=("quantity", "source", "dtype")),
    Stage("claims", "claims.json", "claims_result.schema.json",
          reads=("probe", "correctness", "prefill", "decode", "traffic", "model"),
          files=("claims.yaml",)),
    # The artifact holds the tables and numbers; the files the manuscript uses are derived
    # from it (inferlab.stages.manuscript.derived_files) and their sha256 recorded in it.
    Stage("manuscript", "manuscript.json", "manuscript.schema.json",
          reads=("probe", "prefill", "decode", "traffic", "claims"), sections=("traffic",),
          files=("claims.yaml",),
          derived=("tables.md", "tables.tex", "numbers.json", "numbers.tex")),
)}
# The report is a rule, not a stage: it writes no register entry. Its code is the
# closure of inferlab.report, the claims file and the page template.
REPORT_MODULE = "inferlab.report"
REPORT_FILES = ("claims.yaml", "inferlab/templates/report.html.j2")


def stage(name: str) -> Stage:
    """The declaration of stage ``name``; an unknown name is a ValueError listing them."""
    if name not in STAGES:
        raise ValueError(f"stage={name!r} is not a stage; expected one of {list(STAGES)}")
    return STAGES[name]


def upstream(name: str) -> list[str]:
    """Every stage ``name`` depends on, directly or not, in declaration (DAG) order."""
    needed = set(stage(name).reads)
    for up in stage(name).reads:
        needed |= set(upstream(up))
    return [s for s in STAGES if s in needed]


# --------------------------------------------------------------------------- code files


def _module_file(module: str) -> Path | None:
    """The source file of an ``inferlab`` module (a package's __init__.py), or None."""
    parts = module.split(".")
    if parts[0] != "inferlab":
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports (at any depth of the file, lazily or not)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # from pkg import mod
    return found


@functools.cache
def import_closure(module: str) -> tuple[str, ...]:
    """Files of the ``inferlab`` modules ``module`` imports, transitively, itself and
    the packages on the way included; relative to the repository, sorted."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name] = path
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += [m for m in (*_imports(path, name), *parents) if m.startswith("inferlab")]
    return tuple(sorted({p.relative_to(REPO_ROOT).as_posix() for p in seen.values()}))


def _script_closure(script: str) -> set[str]:
    """A glue script and the import closure of every inferlab module it imports."""
    imported = _imports(REPO_ROOT / script, "__main__")
    return {script}.union(*(import_closure(m) for m in imported if m.startswith("inferlab")))


def code_files(name: str) -> list[str]:
    """The files whose change reruns stage ``name`` (or "report"), relative to the
    repository: the import closure of its module and of its glue script (for a stage,
    the runner: it steadies the process, reads the inputs and writes the artifact) and
    its extra files."""
    if name == "report":
        return sorted({*import_closure(REPORT_MODULE), *_script_closure("scripts/report.py"),
                       *REPORT_FILES})
    declared = stage(name)
    return sorted({*import_closure(declared.module), *_script_closure("scripts/run_stage.py"),
                   *declared.files})
