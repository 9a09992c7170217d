"""The code's shape: one declaration per stage that the Snakefile, the schemas and the
code closures agree with; no import cycle; small modules that say what they do."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferlab import layout, pipeline
from inferlab.pipeline import STAGES
from tests.pipeline_repo import copy_repo, jobs, run

PACKAGE = layout.REPO_ROOT / "inferlab"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(layout.REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture(scope="module")
def snakemake(tmp_path_factory):
    """snakemake(*args) -> stdout, run once per argument list in one temporary copy of the
    repository (Snakemake writes .snakemake/ where it runs; the checkout stays as it was)."""
    repo = copy_repo(tmp_path_factory.mktemp("structure"))

    @functools.cache
    def run_once(*args: str) -> str:
        out = run(repo, *args, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    return run_once


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_has_its_schema_module_caption_and_params(name):
    declared = STAGES[name]
    schema = json.loads(layout.schema_path(declared.schema).read_text())
    assert schema["$id"] == f"inferlab/{name}"
    assert (layout.REPO_ROOT / "captions" / f"{name}.rst").is_file()
    module = __import__(declared.module, fromlist=["Params", "run"])
    assert callable(module.run) and hasattr(module.Params, "from_config")
    config = json.loads(layout.schema_path("config.schema.json").read_text())
    assert set(declared.sections) <= set(config["properties"])
    assert set(declared.reads) < set(STAGES) and name not in pipeline.upstream(name)


def test_the_schemas_stage_enums_and_config_sections_follow_from_the_declaration():
    """Every schema that names the stages names exactly those of ``STAGES`` (a claim:
    those the claims stage reads, every stage declared before it), and the config's
    sections are the global keys and each stage's declared sections."""
    def enum_of(schema_file: str, *path: str) -> set:
        node = json.loads(layout.schema_path(schema_file).read_text())
        for part in path:
            node = node[part]
        return set(node)

    judged = set(STAGES["claims"].reads)
    assert judged == set(list(STAGES)[:list(STAGES).index("claims")])
    stages, artifacts = set(STAGES), {s.artifact for s in STAGES.values()}
    enums = {
        ("sidecar.schema.json", "$defs", "provenance", "properties", "stage", "enum"): stages,
        ("sidecar.schema.json", "properties", "artifact", "enum"): artifacts,
        ("register_entry.schema.json", "properties", "stage", "enum"): stages,
        ("claims.schema.json", "$defs", "check", "properties", "stage", "enum"): judged,
        ("claims_result.schema.json", "$defs", "artifact", "properties", "stage", "enum"):
            judged,
    }
    for (schema_file, *path), expected in enums.items():
        assert enum_of(schema_file, *path) == expected, (schema_file, path)
    sidecar = json.loads(layout.schema_path("sidecar.schema.json").read_text())
    assert sidecar["properties"]["schema"]["pattern"] == f"^inferlab/({'|'.join(STAGES)})$"
    sections = {x for s in STAGES.values() for x in s.sections}
    config = enum_of("config.schema.json", "properties")
    assert config - sections == {"machine", "grid", "device", "threads", "seed"}
    assert sections <= config


def test_the_snakefile_has_one_rule_per_stage_wired_as_declared(snakemake):
    rules = set(snakemake("--list-rules").split())
    assert rules == {*STAGES, "report", "all"}
    graph = snakemake("--rulegraph", "--forceall")
    edges = set(re.findall(r"(\d+) -> (\d+)", graph))
    names = dict(re.findall(r'(\d+)\[label = "(\w+)"', graph))
    wired = {(names[a], names[b]) for a, b in edges}
    declared = {(up, name) for name, s in STAGES.items() for up in s.reads}
    assert {e for e in wired if e[1] in STAGES} == declared
    assert ("claims", "report") in wired and ("report", "all") in wired


def test_stage_rules_hand_the_effective_config_and_threads(snakemake):
    out = snakemake("--dry-run", "--forceall", "--cores", "2", "--printshellcmds", "prefill")
    block = out.split("rule prefill:", 1)[1].split("\n\n", 1)[0]
    assert "threads: 2" in block and "machine=2" in block  # a timing stage runs alone


# --------------------------------------------------------------------------- code


def _imports(path: Path) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found |= {base, *(f"{base}.{a.name}" for a in node.names)}
    known = {_module_name(p) for p in MODULES}
    return {m for m in found if m in known and m != name}


def test_no_import_cycle_inside_inferlab():
    graph = {_module_name(p): _imports(p) for p in MODULES}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(
                    path[path.index(nxt):] + [nxt] if nxt in path else [*path, nxt]))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


# Imports point one way: a module imports only from its own layer or the ones before it.
LAYERS = {
    "foundation": ["inferlab", "inferlab.pipeline", "inferlab.layout", "inferlab.files",
                   "inferlab.shapes", "inferlab.process", "inferlab.logs", "inferlab.stages",
                   "inferlab.validation"],
    "algorithms": ["inferlab.attention", "inferlab.partials", "inferlab.kernels",
                   "inferlab.traffic"],
    "measurement": ["inferlab.environment", "inferlab.memory", "inferlab.clocks",
                    "inferlab.measure", "inferlab.kernel_names", "inferlab.backends",
                    "inferlab.backend_map", "inferlab.ncu", "inferlab.intervals",
                    "inferlab.workers"],
    "stages": ["inferlab.stages.common", "inferlab.stages.probe",
               "inferlab.stages.correctness", "inferlab.stages.prefill",
               "inferlab.stages.decode", "inferlab.stages.traffic", "inferlab.stages.model"],
    "evidence": ["inferlab.artifacts", "inferlab.config", "inferlab.entries",
                 "inferlab.register",
                 "inferlab.provenance", "inferlab.trust", "inferlab.evidence",
                 "inferlab.inputs", "inferlab.compare", "inferlab.verify", "inferlab.adopt",
                 "inferlab.runner"],
    # numtext writes the numbers in claims.json's reasons: evidence, below the report
    "claims": ["inferlab.claims", "inferlab.selection", "inferlab.judging", "inferlab.numtext",
               "inferlab.verdicts", "inferlab.stages.claims"],
    # the manuscript stage comes after claims: it lays the claims out for the text
    "report": ["inferlab.formats", "inferlab.audit", "inferlab.plotting", "inferlab.figures",
               "inferlab.roofline", "inferlab.manuscript", "inferlab.manuscript_check",
               "inferlab.stages.manuscript", "inferlab.report_tables", "inferlab.views",
               *(s.view for s in STAGES.values() if pipeline._module_file(s.view)),
               "inferlab.report"],
    "cli": ["inferlab.cli", "inferlab.__main__"],
}
# Known exceptions, owned by other modules' maintainers: the lead removes each one once
# its move is merged. (importer, imported): the move that removes it.
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_REEXPORTS: set[tuple[str, str, str]] = set()


def _layer_of() -> dict[str, int]:
    return {m: i for i, (_, modules) in enumerate(LAYERS.items()) for m in modules}


def test_every_module_has_a_layer():
    layer = _layer_of()
    assert sum(len(m) for m in LAYERS.values()) == len(layer), "a module in two layers"
    assert set(layer) == {_module_name(p) for p in MODULES}


def test_imports_point_one_way_down_the_layers():
    layer, names = _layer_of(), list(LAYERS)
    upward = set()
    for path in MODULES:
        module = _module_name(path)
        for imported in _imports(path) - {"inferlab"}:  # the package only routes names
            if layer[imported] > layer[module]:
                upward.add((module, imported))
    wrong = sorted(upward - KNOWN_UPWARD)
    assert not wrong, "imports against the layers: " + "; ".join(
        f"{a} ({names[layer[a]]}) -> {b} ({names[layer[b]]})" for a, b in wrong)
    assert KNOWN_UPWARD <= upward, f"fixed, remove: {KNOWN_UPWARD - upward}"


def _defined(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_names_are_imported_from_the_module_that_defines_them():
    """``from inferlab.X import name`` where X only imported ``name`` itself hides where
    it lives (and what the importer really depends on)."""
    by_name = {_module_name(p): p for p in MODULES}
    defined = {m: _defined(p) for m, p in by_name.items()}
    through = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.module not in by_name \
                    or node.module == "inferlab":
                continue
            through |= {(_module_name(path), node.module, a.name) for a in node.names
                        if a.name not in defined[node.module]
                        and f"{node.module}.{a.name}" not in by_name}
    assert not through - KNOWN_REEXPORTS, sorted(through - KNOWN_REEXPORTS)
    assert KNOWN_REEXPORTS <= through, f"fixed, remove: {KNOWN_REEXPORTS - through}"


def test_the_algorithms_check_their_inputs_in_shapes_only():
    """No module imports another's private name (kernels and partials once took
    attention's private checks while shapes.py claimed to be the one check)."""
    private = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inferlab"):
                private |= {(_module_name(path), node.module, a.name) for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")}
    assert not private, sorted(private)


# One fresh interpreter for every rule: it imports the heavy third-party packages first,
# then forks a child per rule that imports what the rule runs and lists the inferlab
# modules loaded. Which inferlab modules an import loads does not depend on torch being
# loaded already; eight interpreters each importing torch took about 25 s on 2 shared cores.
_IMPORTED_BY_RULE = r"""
import importlib, json, os, sys
for heavy in ("torch", "triton", "matplotlib.pyplot", "pandas", "jsonschema", "jinja2"):
    try:
        importlib.import_module(heavy)
    except ImportError:
        pass
assert not [m for m in sys.modules if m.startswith("inferlab")]
loaded = {}
for rule, modules in json.loads(sys.argv[1]).items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 1
        try:
            for module in modules:
                importlib.import_module(module)
            names = sorted(m for m in sys.modules if m.startswith("inferlab"))
            os.write(write, json.dumps(names).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status:
        sys.exit(f"importing {modules} for rule {rule} failed")
    loaded[rule] = json.loads(text)
print(json.dumps(loaded))
"""


@pytest.fixture(scope="module")
def imported_by_rule() -> dict[str, list[str]]:
    """rule -> the inferlab modules loaded by importing what it runs: its glue script's
    module (the runner, which steadies the process and reads and writes the artifacts)
    and the stage's module; for the report, the report module."""
    modules = {name: ["inferlab.runner", STAGES[name].module] for name in STAGES}
    modules["report"] = list(pipeline.report_modules())
    out = subprocess.run([sys.executable, "-c", _IMPORTED_BY_RULE, json.dumps(modules)],
                         cwd=layout.REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", [*STAGES, "report"])
def test_computed_code_files_cover_what_really_gets_imported(imported_by_rule, name):
    """What the rule runs, imported in a fresh interpreter (its glue script's module, the
    runner, which steadies the process and reads and writes the artifacts, and the
    stage's module): every inferlab module loaded is either computing code (its change
    reruns the stage) or declared bookkeeping, and every one is hashed into the sidecar
    (a change to the runner's allocator settings once rerun nothing)."""
    loaded = {m: pipeline._module_file(m).relative_to(layout.REPO_ROOT).as_posix()
              for m in imported_by_rule[name]}
    code, bookkeeping = set(pipeline.code_files(name)), set(pipeline.bookkeeping_files(name))
    assert not code & bookkeeping
    assert set(loaded.values()) <= code | bookkeeping, set(loaded.values()) - code - bookkeeping
    undeclared = {f for m, f in loaded.items() if f not in code and m not in _not_code(name)
                  and f not in _upstream_code(name)}
    assert not undeclared, f"loaded, neither code nor declared bookkeeping: {undeclared}"
    assert all((layout.REPO_ROOT / f).is_file() for f in code | bookkeeping)


def _not_code(name: str) -> frozenset[str]:
    """The modules declared not to compute stage ``name``'s artifact."""
    if name == "report":
        return pipeline.BOOKKEEPING
    return pipeline.BOOKKEEPING | pipeline.PRESENTATION


def _upstream_code(name: str) -> set[str]:
    """For the report, the claims stage's computing code (verdicts, judging ..., loaded
    through the audit's integrity check): it reaches the page through claims.json, an
    input of the report rule, so its change reruns the report all the same."""
    return set(pipeline.code_files("claims")) if name == "report" else set()


# Which stages compute with a module, as its users see it (written out here, not read
# from code_files, so that a closure gone wrong fails); downstream stages and the report
# follow from the declaration.
DIRECT_USERS = {
    "inferlab/kernels.py": {"prefill", "decode"},
    "inferlab/measure.py": {"probe", "prefill", "decode"},
    "inferlab/attention.py": {"correctness", "prefill", "decode", "model"},
    "inferlab/process.py": set(STAGES),
    "inferlab/stages/common.py": set(STAGES) - {"claims"},
    "inferlab/claims.py": {"claims"},
    "claims.yaml": {"claims"},
    "inferlab/figures.py": set(),  # presentation: the report only
    "inferlab/formats.py": set(),
    "inferlab/views/prefill.py": set(),  # a stage's view: the report only
    "inferlab/numtext.py": {"claims", "manuscript"},  # claims.json's reasons, the tables
    "scripts/run_stage.py": set(STAGES),  # Snakemake reruns a rule whose script is newer
}
# Everything a stage's run loads besides its computing code, from the list.
BOOKKEEPING_FILES = ["inferlab/register.py", "inferlab/provenance.py", "inferlab/trust.py",
                     "inferlab/files.py", "inferlab/artifacts.py",
                     "inferlab/evidence.py", "inferlab/layout.py", "inferlab/config.py",
                     "inferlab/pipeline.py", "inferlab/runner.py", "inferlab/inputs.py",
                     "inferlab/logs.py", "inferlab/audit.py", "inferlab/__init__.py",
                     "inferlab/stages/__init__.py"]


def _rerun_by(direct: set[str]) -> set[str]:
    """``direct``, every stage downstream of them, and the report."""
    hit = set(direct)
    for name in STAGES:  # declaration order is DAG order
        if hit & set(STAGES[name].reads):
            hit.add(name)
    return hit | {"report"}


def test_bookkeeping_reruns_nothing_and_computing_code_exactly_its_stages(tmp_path):
    """One repository copy with every output present and newer than every file, then
    dry runs: an edit of every bookkeeping module at once leaves nothing to do; an edit
    of one computing module reruns exactly the stages that compute with it."""
    repo = copy_repo(tmp_path / "repo")
    args = ["--dry-run", "--cores", "2", "--config", "machine=test-bookkeeping"]
    old, made = time.time() - 3000, time.time() - 2000
    for path in repo.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    key = "test-bookkeeping"
    outputs = [layout.report_path(repo)]
    for name in STAGES:
        artifact = layout.artifact_path(repo, key, name)
        outputs += [artifact, layout.sidecar_path(artifact)]
    for path in outputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("made\n")
        os.utime(path, (made, made))
    assert jobs(run(repo, *args)) == set()

    for rel in BOOKKEEPING_FILES:
        with open(repo / rel, "a", encoding="utf-8") as f:
            f.write("\n# an edited message\n")
    assert jobs(run(repo, *args)) == set()

    for rel, direct in DIRECT_USERS.items():
        os.utime(repo / rel)  # now: newer than the outputs
        assert jobs(run(repo, *args)) == _rerun_by(direct), rel
        os.utime(repo / rel, (old, old))


def test_every_stage_has_a_view_or_says_why_not():
    """The report's per-stage hook (inferlab/views/): a stage shows what it has through its
    view, beside it, or is declared to have none (``views.NO_VIEW``), never both."""
    from inferlab import views

    for name, declared in STAGES.items():
        view = views.load(name)
        assert (view is None) == (name in views.NO_VIEW), name
        if view is not None:
            assert {"id", "title", "caption"} <= set(view.SECTION), name
            assert callable(view.tables)
            optional = [getattr(view, f) for f in ("figures", "figure_of") if hasattr(view, f)]
            assert all(callable(f) for f in optional), name
            assert f"inferlab/views/{name}.py" in pipeline.code_files("report")
            assert declared.view in pipeline.PRESENTATION
    assert set(views.NO_VIEW) <= set(STAGES)


def test_the_report_module_names_no_stage():
    """Adding a stage adds lines to its view, never to report.py: no string in it is a
    stage's name (its sections, tables and figures come from the views)."""
    tree = ast.parse((PACKAGE / "report.py").read_text(encoding="utf-8"))
    named = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) and node.value in STAGES})
    assert named == [], f"report.py names the stages {named}: move that into their views"


def test_attention_is_not_code_of_probe_but_of_the_stages_that_use_it():
    assert "inferlab/attention.py" not in pipeline.code_files("probe")
    assert all("inferlab/attention.py" in pipeline.code_files(s)
               for s in ("correctness", "prefill", "decode"))
    assert "claims.yaml" in pipeline.code_files("claims")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_says_its_job_and_stays_small(path):
    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree), f"{path.name} has no opening docstring"
    assert len(path.read_text().splitlines()) <= 420, f"{path.name} is over ~400 lines"


def test_the_texts_that_list_the_stages_list_them_all():
    from inferlab import stages
    from inferlab.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    help_text = sub.choices["stage"].format_help()
    doc = stages.__doc__
    for name, declared in STAGES.items():
        assert name in help_text, f"`inferlab stage --help` does not name {name}"
        assert f"``{name}``" in doc and declared.artifact in doc, f"stages/__init__: {name}"
    contracts = (layout.REPO_ROOT / "docs" / "contracts.md").read_text()
    for declared in STAGES.values():
        assert f"results/{{key}}/{declared.artifact} " in contracts, declared.artifact


def test_the_slurm_profile_gives_every_rule_its_resources():
    """profiles/slurm names each rule's partition and size; a stage added without them
    would break the cluster test only where Slurm is installed (CI), so check it here."""
    import yaml

    profile = yaml.safe_load((layout.REPO_ROOT / "profiles" / "slurm" / "config.yaml")
                             .read_text(encoding="utf-8"))
    assert set(profile["set-resources"]) == {*STAGES, "report"}
