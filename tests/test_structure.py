"""The code's shape: one declaration per stage that the Snakefile, the schemas and the
code closures agree with; no import cycle; small modules that say what they do."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab import layout, pipeline
from inferlab.pipeline import STAGES
from tests.pipeline_repo import copy_repo, run

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


def test_the_claims_schemas_list_exactly_the_stages_a_claim_can_read():
    readable = set(STAGES) - {"claims"}
    spec = json.loads(layout.schema_path("claims.schema.json").read_text())
    assert set(spec["$defs"]["check"]["properties"]["stage"]["enum"]) == readable
    result = json.loads(layout.schema_path("claims_result.schema.json").read_text())
    assert set(result["$defs"]["artifact"]["properties"]["stage"]["enum"]) == readable
    assert set(STAGES["claims"].reads) == readable


def test_sidecar_and_register_schemas_list_exactly_the_stages():
    sidecar = json.loads(layout.schema_path("sidecar.schema.json").read_text())
    props = sidecar["properties"]
    provenance = sidecar["$defs"]["provenance"]["properties"]
    assert set(provenance["stage"]["enum"]) == set(STAGES)
    assert set(props["artifact"]["enum"]) == {s.artifact for s in STAGES.values()}
    assert props["schema"]["pattern"] == f"^inferlab/({'|'.join(STAGES)})$"
    entry = json.loads(layout.schema_path("register_entry.schema.json").read_text())
    assert set(entry["properties"]["stage"]["enum"]) == set(STAGES)


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
    modules["report"] = [pipeline.REPORT_MODULE]
    out = subprocess.run([sys.executable, "-c", _IMPORTED_BY_RULE, json.dumps(modules)],
                         cwd=layout.REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", [*STAGES, "report"])
def test_computed_code_files_cover_what_really_gets_imported(imported_by_rule, name):
    """Every inferlab module that what the rule runs loads in a fresh interpreter must be
    among the files whose change reruns it (a change to the runner's allocator settings
    once rerun nothing)."""
    loaded = {pipeline._module_file(m).relative_to(layout.REPO_ROOT).as_posix()
              for m in imported_by_rule[name]}
    assert loaded <= set(pipeline.code_files(name)), loaded - set(pipeline.code_files(name))
    assert all((layout.REPO_ROOT / f).is_file() for f in pipeline.code_files(name))


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
