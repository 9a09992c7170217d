"""The code's shape: one declaration per stage that the Snakefile, the schemas and the
code closures agree with; no import cycle; small modules that say what they do."""

from __future__ import annotations

import ast
import graphlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab.core import layout, pipeline
from inferlab.core.pipeline import STAGES

PACKAGE = layout.REPO_ROOT / "inferlab"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(layout.REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_has_its_schema_and_module_and_reads_only_stages_before_it(name):
    """(Its caption and config sections: the generate and schema tests below.)"""
    declared = STAGES[name]
    schema = json.loads(layout.schema_path(declared.schema).read_text())
    assert schema["$id"] == f"inferlab/{name}"
    module = __import__(declared.module, fromlist=["Params", "run"])
    assert callable(module.run) and hasattr(module.Params, "from_config")
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
        ("claims_result.schema.json", "$defs", "artifact", "properties", "stage", "enum"):
            judged,
    }
    for (schema_file, *path), expected in enums.items():
        assert enum_of(schema_file, *path) == expected, (schema_file, path)
    sidecar = json.loads(layout.schema_path("sidecar.schema.json").read_text())
    assert sidecar["properties"]["schema"]["pattern"] == f"^inferlab/({'|'.join(STAGES)})$"
    sections = {x for s in STAGES.values() for x in s.sections}
    config = enum_of("config.schema.json", "properties")
    assert config - sections == {"machine", "grid", "device", "threads", "seed", "gpu_call"}
    call = enum_of("config.schema.json", "properties", "gpu_call", "properties", "stages",
                   "properties")
    assert call == {name for name, s in STAGES.items() if s.needs_device}
    assert sections <= config


# --------------------------------------------------------------------------- code


def _imported(tree: ast.AST, package: str = "") -> set[str]:
    """What the import statements in ``tree`` load: each module and each ``module.name``
    (a relative import resolved against ``package``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found |= {base, *(f"{base}.{a.name}" for a in node.names)}
    return found


def _imports(path: Path) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = {_module_name(p) for p in MODULES}
    return {m for m in _imported(ast.parse(path.read_text()), package) if m in known
            and m != name}


def test_no_import_cycle_inside_inferlab():
    graph = {_module_name(p): _imports(p) for p in MODULES}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail("import cycle: " + " -> ".join(reversed(exc.args[1])))  # importer first


# Imports point one way down the layers (pipeline.LAYERS, bottom up), and a module's layer
# is its folder: no list of modules is kept anywhere.
def test_every_module_lies_in_a_declared_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == {layer.package for layer in pipeline.LAYERS}
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == {"__init__.py", "__main__.py"}, "a module outside the layers' folders"
    assert all(pipeline.layer_of(_module_name(p)) for p in MODULES if p.parent != PACKAGE)


_MODULE_VALUE = re.compile(r"^inferlab(?:\.[a-z_]+)+(?::[a-z_]+)?$")


def _named_in_strings(path: Path, source: str | None = None) -> set[str]:
    """The inferlab modules a file imports through a string: code in a string (a worker's
    ``-c`` boot code) and a string that is a module's name ("inferlab.x.y", or a
    "module:function" factory), which ``importlib`` loads. The declaration
    (``core.pipeline``) names modules whose source it reads, never imports."""
    known = {_module_name(p) for p in MODULES}
    source = path.read_text(encoding="utf-8") if source is None else source
    named = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value.strip()
        if _MODULE_VALUE.match(text) and _module_name(path) != "inferlab.core.pipeline":
            named.add(text.partition(":")[0])
        elif "import inferlab" in text or "from inferlab" in text:
            try:
                named |= _imported(ast.parse(text.replace("; ", "\n")))
            except SyntaxError:
                continue
    return {n for n in named if n in known and n != _module_name(path)}


def test_imports_point_one_way_down_the_layers():
    order = {layer.package: i for i, layer in enumerate(pipeline.LAYERS)}

    def rank(module: str) -> int:
        layer = pipeline.layer_of(module)
        return len(order) if layer is None else order[layer.package]  # the package routes

    upward = set()
    for path in MODULES:
        module = _module_name(path)
        if pipeline.layer_of(module) is None:
            continue
        for imported in (_imports(path) | _named_in_strings(path)) - {"inferlab"}:
            if rank(imported) > rank(module):
                upward.add(f"{module} -> {imported}")
    assert not upward, "imports against the layers: " + "; ".join(sorted(upward))


def test_the_layer_test_sees_an_import_inside_a_string():
    """It would have caught the timing worker's boot code loading the runner (and with it
    pandas) in every worker process."""
    workers = PACKAGE / "measurement" / "workers.py"
    text = workers.read_text(encoding="utf-8")
    assert "inferlab.workflow.runner" not in _named_in_strings(workers)
    old = text.replace("from inferlab.measurement.process import steady_process",
                       "from inferlab.workflow.runner import steady_process")
    assert old != text and "inferlab.workflow.runner" in _named_in_strings(workers, old)


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
    assert not through, sorted(through)


def test_no_module_imports_another_modules_private_name():
    """A private name is its module's own (the algorithms' input checks live in shapes.py,
    not in a private helper of attention.py)."""
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
    modules = {name: ["inferlab.workflow.runner", STAGES[name].module] for name in STAGES}
    modules["report"] = list(pipeline.report_modules())
    out = subprocess.run([sys.executable, "-c", _IMPORTED_BY_RULE, json.dumps(modules)],
                         cwd=layout.REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", [*STAGES, "report"])
def test_computed_code_files_cover_what_really_gets_imported(imported_by_rule, name):
    """Every inferlab module the rule loads is either computing code (its change reruns the
    stage) or declared bookkeeping, and every one is hashed into the sidecar (so that a
    change to the runner's allocator settings reruns the stages)."""
    loaded = {m: pipeline._module_file(m).relative_to(layout.REPO_ROOT).as_posix()
              for m in imported_by_rule[name]}
    code, bookkeeping = set(pipeline.code_files(name)), set(pipeline.bookkeeping_files(name))
    assert not code & bookkeeping
    assert set(loaded.values()) <= code | bookkeeping, set(loaded.values()) - code - bookkeeping
    assert all(pipeline.computes(m) for m, f in loaded.items() if f in code)
    assert all((layout.REPO_ROOT / f).is_file() for f in code | bookkeeping)


def test_every_stage_view_has_the_hook_the_report_calls():
    """The report's per-stage hook (inferlab/presentation/views/): a stage shows what it has
    through its view, beside it."""
    from inferlab.presentation import sections

    for name, declared in STAGES.items():
        view = sections.load(name)
        if view is not None:
            assert {"id", "title", "caption"} <= set(view.SECTION), name
            assert callable(view.tables)
            assert callable(getattr(view, "figures", callable)), name
            assert isinstance(getattr(view, "FIGURE", ""), str), name  # a claim's figure
            assert f"inferlab/presentation/views/{name}.py" in pipeline.code_files("report")
            assert pipeline.computes(declared.view)


def test_the_report_module_names_no_stage():
    """Adding a stage adds lines to its view, never to report.py: no string in it is a
    stage's name (its sections, tables and figures come from the views)."""
    tree = ast.parse((PACKAGE / "presentation" / "report.py").read_text(encoding="utf-8"))
    keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
    named = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) and node.value in STAGES
                    and id(node) not in keys})  # a dict's key ("claims": ...) names no stage
    assert named == [], f"report.py names the stages {named}: move that into their views"


def test_attention_is_not_code_of_probe_but_of_the_stages_that_use_it():
    assert "inferlab/algorithms/attention.py" not in pipeline.code_files("probe")
    assert all("inferlab/algorithms/attention.py" in pipeline.code_files(s)
               for s in ("correctness", "prefill", "decode"))
    assert "claims.yaml" in pipeline.code_files("claims")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_says_its_job(path):
    """A module is one idea a reader can hold, and its docstring says which (no size cap:
    a cap split classes into fragments; cohesion is the reviewer's to judge); a layer's
    ``__init__`` is only that docstring, never code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{path.name} has no opening docstring"
    if path.name == "__init__.py" and path.parent != PACKAGE:
        assert len(tree.body) == 1, f"{path} holds code"


def test_every_file_that_restates_the_declaration_is_current_and_names_every_stage():
    """The schemas' stage enums, the Slurm profile and docs/contracts.md's tables are what
    ``inferlab generate`` makes of the declaration, and that names every stage: the
    profile gives each rule its partition and size (a rule without them would break the
    cluster test only where Slurm is installed), contracts.md its artifact's path."""
    import yaml

    from inferlab.workflow.cli import build_parser
    from inferlab.workflow.generate import generate

    assert generate(layout.REPO_ROOT, check=True) == [], \
        "run `python -m inferlab generate` and commit what it rewrites"
    profile = yaml.safe_load((layout.REPO_ROOT / "profiles" / "slurm" / "config.yaml")
                             .read_text(encoding="utf-8"))
    assert set(profile["set-resources"]) == {*STAGES, "report"}
    contracts = (layout.REPO_ROOT / "docs" / "contracts.md").read_text()
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    help_text = sub.choices["stage"].format_help()
    for name, declared in STAGES.items():
        assert name in help_text, f"`inferlab stage --help` does not name {name}"
        assert f"results/{{key}}/{declared.artifact} " in contracts, declared.artifact
