"""The pipeline's stages, declared once (``STAGES``), and the package's layers (``LAYERS``).

Everything that needs to know a stage reads ``STAGES``: the Snakefile's rules, the runner,
``inferlab adopt``, the claims checks and the report. A stage's name is also its rule's
and its module's, ``inferlab.stages.<name>`` (``Params.from_config(cfg)``, ``run(params,
ctx)``). The code files whose change reruns a stage are not listed by hand: they are the
computing modules its module and the process settings import, transitively
(``code_files``), read from the source with ``ast`` so this module imports neither torch
nor any stage. The rest its run loads (``bookkeeping_files``) is hashed into every sidecar
but triggers no rerun.

This module is a leaf: it imports nothing from ``inferlab``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # inferlab/
REPO_ROOT = PACKAGE_DIR.parent

# ``reads=EARLIER``: every stage declared before this one (the claims judge them all).
EARLIER = ("<every earlier stage>",)


@dataclass(frozen=True)
class Cluster:
    """What a stage's job asks a cluster for (``profiles/slurm``, generated)."""

    gpu: bool = False
    runtime_min: int = 5
    mem_mb: int = 2000


@dataclass(frozen=True)
class Stage:
    name: str
    table: bool                    # a CSV table ({name}.csv), else a JSON document ({name}.json)
    reads: tuple[str, ...] = ()    # stages whose artifacts it reads (EARLIER: all before it)
    configured: bool = True        # it has a config section of its own name
    files: tuple[str, ...] = ()    # other files it reads, relative to the repository
    timed: bool = False            # it measures time: never beside another stage
    on_device: bool = False        # it runs code on the device (a timed stage always does):
    #                                the others are derived from artifacts, on any host
    key_columns: tuple[str, ...] = ()  # a table's columns that name a row (its point)
    schema_file: str | None = None  # when not {name}.schema.json
    derived: tuple[str, ...] = ()  # files made from the artifact, in results/{key}/{name}/
    also_reads_config: tuple[str, ...] = ()  # other stages' config sections it computes from
    reads_register: bool = False   # it reads the registers (its key's, and the series those
    #                                of machines of its kind): declared as its inputs
    cluster: Cluster = Cluster()   # its job on a cluster (profiles/slurm is generated)

    @property
    def module(self) -> str:
        return f"inferlab.stages.{self.name}"

    @property
    def view(self) -> str:
        return f"inferlab.presentation.views.{self.name}"

    @property
    def artifact(self) -> str:
        return f"{self.name}.{'csv' if self.table else 'json'}"

    @property
    def schema(self) -> str:
        return self.schema_file or f"{self.name}.schema.json"

    @property
    def is_table(self) -> bool:
        return self.table

    @property
    def needs_device(self) -> bool:
        """Whether it must run where its machine's device is; a stage that need not can be
        derived for any machine's key on any host (a reviewer re-deriving the claims)."""
        return self.timed or self.on_device

    @property
    def measured(self) -> bool:
        """Whether its versions are kept in the register: what it measured on the device
        cannot be made again."""
        return self.needs_device

    @property
    def sections(self) -> tuple[str, ...]:
        """The config sections of its effective config (``timing`` exactly when timed)."""
        return (((self.name,) if self.configured else ()) + self.also_reads_config
                + (("timing",) if self.timed else ()))


def _declare(*stages: Stage) -> dict[str, Stage]:
    declared: dict[str, Stage] = {}
    for s in stages:
        if s.reads == EARLIER:
            s = replace(s, reads=tuple(declared))
        declared[s.name] = s
    return declared


STAGES: dict[str, Stage] = _declare(
    Stage("probe", table=False, timed=True, cluster=Cluster(True, 15, 16000)),
    Stage("correctness", table=True, on_device=True, cluster=Cluster(True, 20, 16000),
          key_columns=("check", "impl", "T", "dtype", "causal", "score_scale", "block_q",
                       "block_k", "splits")),
    Stage("prefill", table=True, reads=("probe",), timed=True, cluster=Cluster(True, 60, 64000),
          key_columns=("impl", "fused_sdpa", "T", "dtype", "causal", "block_q", "block_k",
                       "batch", "heads", "d")),
    Stage("decode", table=True, reads=("probe",), timed=True, cluster=Cluster(True, 30, 16000),
          key_columns=("impl", "fused_sdpa", "cache_len", "batch", "dtype", "splits", "heads",
                       "kv_heads", "d")),
    # every timed point pooled over the machine's series of runs made alike: what traffic,
    # claims and manuscript judge (a point the latest run dropped is still measured)
    Stage("series", table=True, reads=("prefill", "decode"), reads_register=True,
          key_columns=("stage", "kind", "version", "impl", "fused_sdpa", "T", "cache_len",
                       "batch", "heads", "kv_heads", "d", "dtype", "causal", "splits",
                       "block_q", "block_k")),
    # the probe's ceilings give naive attention's roofline beside each point (its balance)
    Stage("traffic", table=True, reads=("probe", "series"),
          key_columns=("T", "d", "causal", "dtype", "tile", "block_q_model")),
    # times a launch floor and a multiply-add: timed, with the timing section's settings
    Stage("model", table=True, reads=("probe",), timed=True, cluster=Cluster(True, 10, 8000),
          key_columns=("quantity", "source", "dtype")),
    # configured by claims.yaml (one of its code files), not by a config section
    Stage("claims", table=False, reads=EARLIER, configured=False, files=("claims.yaml",),
          schema_file="claims_result.schema.json"),
    # its lengths are the traffic model's (the chapter's 1,024-8,192 tokens); the files the
    # manuscript uses are derived from its artifact, which records their sha256
    Stage("manuscript", table=False, reads=("probe", "series", "traffic", "claims"),
          configured=False, also_reads_config=("traffic",), files=("claims.yaml",),
          reads_register=True,  # the git commit of every version its numbers come from
          derived=("tables.md", "tables.tex", "numbers.json", "numbers.tex")),
)
# The stage whose artifact (claims.json) holds every verdict: the report's spine.
CLAIMS_STAGE = "claims"
# The report's job on a cluster (it is a rule, not a stage)
REPORT_CLUSTER = Cluster(runtime_min=10, mem_mb=4000)


@dataclass(frozen=True)
class Layer:
    """One subpackage of ``inferlab``, listed bottom up: a module imports only from its own
    layer and the ones before. A computing layer's modules are code of the stages whose
    artifacts they compute (``code_files``); the others are bookkeeping."""

    package: str
    computes: bool

    @property
    def module(self) -> str:
        return f"inferlab.{self.package}"


LAYERS: tuple[Layer, ...] = (
    Layer("core", computes=False),
    Layer("algorithms", computes=True),
    Layer("measurement", computes=True),
    Layer("evidence", computes=False),
    Layer("judging", computes=True),
    Layer("presentation", computes=True),
    Layer("stages", computes=True),
    Layer("workflow", computes=False),
)


def layer_of(module: str) -> Layer | None:
    """The layer a module of ``inferlab`` belongs to; None for the package's own
    ``__init__``/``__main__``, which only route."""
    parts = module.split(".")
    return next((layer for layer in LAYERS if parts[1:2] == [layer.package]), None)


def computes(module: str) -> bool:
    """Whether ``module`` is computing code: a module (not an ``__init__``) of a computing
    layer."""
    layer = layer_of(module)
    path = _module_file(module)
    return bool(layer and layer.computes and path is not None and path.name != "__init__.py")


# How the runner settles the process (allocator, OpenMP, threads, seed) before a stage
# runs: it changes the numbers, so it is computing code of every stage.
PROCESS_MODULE = "inferlab.measurement.process"
# The rules' glue scripts (Snakemake reruns a rule whose script is newer than its outputs)
STAGE_SCRIPT = "scripts/run_stage.py"
REPORT_SCRIPT = "scripts/report.py"

# The report is a rule, not a stage. Its code is the closure of its module and of every
# stage's view (loaded by name, not imported), the claims, its sentences and template.
REPORT_MODULE = "inferlab.presentation.report"
REPORT_FILES = ("claims.yaml", "docs/chapter/sentences.yaml",
                "inferlab/presentation/templates/report.html.j2")


def report_modules() -> tuple[str, ...]:
    """The report's module and every stage view that exists (``inferlab/presentation/views/``)."""
    return (REPORT_MODULE, *(s.view for s in STAGES.values() if _module_file(s.view)))


# What of claims.yaml a stage computes from: each claim's id, kind and check, and the
# file's version, fp16 stand-in and chapter GPU. Its notes and readings are for people: an
# edit of them reruns the report (which shows them), never claims or manuscript.
CLAIMS_FILE = "claims.yaml"
CLAIMS_COMPUTED = ("id", "kind", "check")


def content_sha256(path: Path) -> str:
    """The sha256 of what a stage computes from ``path``: its bytes, or for claims.yaml its
    computed part."""
    data = path.read_bytes()
    return _claims_sha256(data) if path.name == CLAIMS_FILE else hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=4)
def _claims_sha256(data: bytes) -> str:
    """Cached by the file's bytes: parsing claims.yaml takes about 0.1 s, and the report
    and adopt ask it for every stage of every key."""
    import yaml

    parsed = yaml.safe_load(data) or {}
    kept = {"version": parsed.get("version"), "fp16_stand_in": parsed.get("fp16_stand_in"),
            "chapter_gpu": parsed.get("chapter_gpu"),
            "claims": [{k: c.get(k) for k in CLAIMS_COMPUTED}
                       for c in parsed.get("claims") or [] if isinstance(c, dict)]}
    data = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(data).hexdigest()


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
def import_closure(module: str, code_only: bool = False) -> tuple[str, ...]:
    """Files of the ``inferlab`` modules ``module`` imports, transitively, itself and the
    packages on the way included; with ``code_only``, only (and through) computing modules."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or (code_only and not computes(name)):
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
    """The files whose change reruns stage ``name`` (or "report"): the computing modules
    its module (or the report's views) and the process settings import, its extra files,
    and the rule's glue script (Snakemake reruns a rule whose script is newer)."""
    if name == "report":
        return sorted({*(f for m in report_modules() for f in import_closure(m, True)),
                       REPORT_SCRIPT, *REPORT_FILES})
    declared = stage(name)
    return sorted({*import_closure(declared.module, True), *import_closure(PROCESS_MODULE, True),
                   STAGE_SCRIPT, *declared.files})


def bookkeeping_files(name: str) -> list[str]:
    """The other files a run of stage ``name`` (or "report") loads: hashed into every
    sidecar, never a rerun trigger."""
    if name == "report":
        loaded = {*(f for m in report_modules() for f in import_closure(m)),
                  *_script_closure(REPORT_SCRIPT)}
    else:
        loaded = {*import_closure(stage(name).module), *import_closure(PROCESS_MODULE),
                  *_script_closure(STAGE_SCRIPT)}
    return sorted(loaded - set(code_files(name)))
