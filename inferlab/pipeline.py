"""The pipeline's stages, declared once.

Everything that needs to know a stage reads ``STAGES``: the Snakefile's rules (inputs,
outputs, params, resources), the runner, ``inferlab adopt``, the claims checks (column
names against the artifact schema) and the report. A stage is

* a name, which is also its rule's name and its module ``inferlab.stages.<name>``
  (``Params.from_config(cfg)`` and ``run(params, ctx)``);
* whether its artifact is a table: then it is ``results/{key}/<name>.csv``, else
  ``<name>.json``; its schema is ``schemas/<name>.schema.json`` (claims: its result's);
* the stages whose artifacts it reads (``EARLIER``: all declared before it);
* whether it times anything (then it never shares the machine with another stage), and
  whether it has a config section: its config sections
  are its own name's and ``timing`` exactly when timed. Their values for the device
  found, with the seed, are the stage's *effective config*
  (``inferlab.config.effective_config``), which is the rule's rerun trigger, the
  provenance's ``config_sha256`` and what adopt compares;
* extra files it reads (``claims.yaml``), which count as its code;
* for a table, the columns that name a row (its point), so two versions can be compared.

The code files whose change reruns a stage are not listed by hand: they are the code
that computes its artifact (``code_files``): the import closure of its module inside
``inferlab/`` and of the process settings (``inferlab.process``), read from the source
with ``ast`` so this module imports neither torch nor any other stage, stopping at the
declared ``BOOKKEEPING`` modules (they record, check, store or show what a stage computed,
never what it computes). The bookkeeping the stage's run loads besides
(``bookkeeping_files``: the runner, register, provenance, artifacts I/O ...) is hashed
into every sidecar but triggers no rerun.

This module is a leaf: it imports nothing from ``inferlab``.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, replace
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


# ``reads=EARLIER``: every stage declared before this one (the claims judge them all).
EARLIER = ("<every earlier stage>",)


@dataclass(frozen=True)
class Stage:
    name: str
    table: bool                    # a CSV table ({name}.csv), else a JSON document ({name}.json)
    reads: tuple[str, ...] = ()    # stages whose artifacts it reads (EARLIER: all before it)
    configured: bool = True        # it has a config section of its own name
    files: tuple[str, ...] = ()    # other files it reads, relative to the repository
    timed: bool = False            # it measures time: never beside another stage
    key_columns: tuple[str, ...] = ()  # a table's columns that name a row (its point)
    schema_file: str | None = None  # when not {name}.schema.json
    derived: tuple[str, ...] = ()  # files made from the artifact, in results/{key}/{name}/
    also_reads_config: tuple[str, ...] = ()  # other stages' config sections it computes from

    @property
    def module(self) -> str:
        return f"inferlab.stages.{self.name}"

    @property
    def view(self) -> str:
        """Its report view (``inferlab.views``), where it has one."""
        return f"inferlab.views.{self.name}"

    @property
    def artifact(self) -> str:
        """Its file name in results/{key}/."""
        return f"{self.name}.{'csv' if self.table else 'json'}"

    @property
    def schema(self) -> str:
        """Its artifact's schema, a file name in schemas/."""
        return self.schema_file or f"{self.name}.schema.json"

    @property
    def is_table(self) -> bool:
        return self.table

    @property
    def sections(self) -> tuple[str, ...]:
        """The config sections of its effective config: its own, those of other stages it
        computes from, and ``timing`` exactly when it measures time."""
        return (((self.name,) if self.configured else ()) + self.also_reads_config
                + (("timing",) if self.timed else ()))


def _declare(*stages: Stage) -> dict[str, Stage]:
    """{name: stage}, with ``EARLIER`` replaced by the names declared before it."""
    declared: dict[str, Stage] = {}
    for s in stages:
        if s.reads == EARLIER:
            s = replace(s, reads=tuple(declared))
        declared[s.name] = s
    return declared


STAGES: dict[str, Stage] = _declare(
    Stage("probe", table=False, timed=True),
    Stage("correctness", table=True,
          key_columns=("check", "impl", "T", "dtype", "causal", "score_scale", "block_q",
                       "block_k", "splits")),
    Stage("prefill", table=True, reads=("probe",), timed=True,
          key_columns=("impl", "fused_sdpa", "T", "dtype", "causal", "block_q", "block_k",
                       "batch", "heads", "d")),
    Stage("decode", table=True, reads=("probe",), timed=True,
          key_columns=("impl", "fused_sdpa", "cache_len", "batch", "dtype", "splits", "heads",
                       "d")),
    Stage("traffic", table=True, reads=("prefill",),
          key_columns=("T", "d", "causal", "dtype", "tile", "block_q_model")),
    Stage("model", table=True, reads=("probe",), key_columns=("quantity", "source", "dtype")),
    # configured by claims.yaml (one of its code files), not by a config section
    Stage("claims", table=False, reads=EARLIER, configured=False, files=("claims.yaml",),
          schema_file="claims_result.schema.json"),
    # The artifact holds the tables and numbers; the files the manuscript uses are derived
    # from it (inferlab.manuscript.derived_files) and their sha256 recorded in it. Its
    # lengths are the traffic model's (the chapter's 1,024-8,192 tokens).
    Stage("manuscript", table=False, reads=("probe", "prefill", "decode", "traffic", "claims"),
          configured=False, also_reads_config=("traffic",), files=("claims.yaml",),
          derived=("tables.md", "tables.tex", "numbers.json", "numbers.tex")),
)
# The stage whose artifact (claims.json) holds every verdict: the report's spine.
CLAIMS_STAGE = "claims"
# What records, checks, stores or shows a stage's artifact, never what it computes: hashed
# into every sidecar (bookkeeping_files), no rerun trigger. The package __init__ files
# only route imports; config.py's effect on a stage is its effective config, hashed apart.
BOOKKEEPING = frozenset({
    "inferlab", "inferlab.stages", "inferlab.pipeline", "inferlab.layout", "inferlab.config",
    "inferlab.files", "inferlab.artifacts", "inferlab.register", "inferlab.provenance",
    "inferlab.trust", "inferlab.evidence", "inferlab.runner", "inferlab.verify",
    "inferlab.adopt", "inferlab.audit", "inferlab.cli", "inferlab.__main__", "inferlab.inputs",
    "inferlab.logs", "inferlab.validation", "inferlab.entries",
})
# Text and pictures for people: bookkeeping for a stage, the report's own code.
PRESENTATION = frozenset({
    "inferlab.formats", "inferlab.report", "inferlab.report_tables", "inferlab.figures",
    "inferlab.roofline", "inferlab.plotting", "inferlab.views",
    *(s.view for s in STAGES.values()),
})
# How the runner settles the process (allocator, OpenMP, threads, seed) before a stage
# runs: it changes the numbers, so it is computing code of every stage.
PROCESS_MODULE = "inferlab.process"
# The rules' glue scripts (Snakemake reruns a rule whose script is newer than its outputs)
STAGE_SCRIPT = "scripts/run_stage.py"
REPORT_SCRIPT = "scripts/report.py"

# The report is a rule, not a stage: it writes no register entry. Its code is the
# closure of inferlab.report and of every stage's view (loaded by name, not imported:
# report_modules), the claims file and the page template.
REPORT_MODULE = "inferlab.report"
REPORT_FILES = ("claims.yaml", "inferlab/templates/report.html.j2")


def report_modules() -> tuple[str, ...]:
    """The report's module and every stage view that exists (``inferlab/views/``)."""
    return (REPORT_MODULE, *(s.view for s in STAGES.values() if _module_file(s.view)))


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
def import_closure(module: str, stop: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Files of the ``inferlab`` modules ``module`` imports, transitively, itself and
    the packages on the way included, except the modules in ``stop`` (not followed
    either); relative to the repository, sorted."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name in stop:
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
    repository: the code that computes its artifact. For a stage, the closure of its
    module and of the process settings short of bookkeeping and presentation, and its
    extra files; for the report, the closure of its module short of bookkeeping, the
    claims file and its template. The rule's glue script counts too, though it only hands
    over: Snakemake itself reruns a rule whose script is newer than its outputs."""
    if name == "report":
        return sorted({*(f for m in report_modules() for f in import_closure(m, BOOKKEEPING)),
                       REPORT_SCRIPT, *REPORT_FILES})
    declared, stop = stage(name), BOOKKEEPING | PRESENTATION
    return sorted({*import_closure(declared.module, stop), *import_closure(PROCESS_MODULE, stop),
                   STAGE_SCRIPT, *declared.files})


def bookkeeping_files(name: str) -> list[str]:
    """The other files a run of stage ``name`` (or "report") loads: its glue script and
    every module of the full closure that ``code_files`` leaves out. Hashed into every
    sidecar, never a rerun trigger."""
    if name == "report":
        loaded = {*(f for m in report_modules() for f in import_closure(m)),
                  *_script_closure(REPORT_SCRIPT)}
    else:
        loaded = {*import_closure(stage(name).module), *import_closure(PROCESS_MODULE),
                  *_script_closure(STAGE_SCRIPT)}
    return sorted(loaded - set(code_files(name)))
