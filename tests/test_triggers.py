"""Rerun triggers exactly right, both ways: an edit that changes an artifact's bytes reruns
that stage and what follows, an edit that changes none reruns nothing; and the Snakefile
wired as the stage declaration says. One temporary copy of the repository whose every
output exists and is newer than every file (``current``); most answers are read from one
forced dry run's job listing, compared in process, and a few edits are dry-run for real.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
import yaml

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from tests.pipeline_repo import copy_repo, jobs, run

KEY = "test-triggers"
ARGS = ["--dry-run", "--cores", "2", "--config", f"machine={KEY}"]


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    """A copy whose every output exists and is newer than every other file; its register
    exists (the series and the manuscript read it)."""
    repo = copy_repo(tmp_path_factory.mktemp("triggers"))
    old, made = time.time() - 3000, time.time() - 2000
    for path in repo.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    outputs = [layout.report_path(repo), layout.register_path(repo, KEY)]
    for name, declared in STAGES.items():
        artifact = layout.artifact_path(repo, KEY, name)
        outputs += [artifact, layout.sidecar_path(artifact)]
        outputs += [layout.derived_path(repo, KEY, name, f) for f in declared.derived]
    for path in outputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("made\n")
        os.utime(path, (made, made))
    assert jobs(run(repo, *ARGS)) == set()
    return repo, old


@pytest.fixture(scope="module")
def listed(current) -> dict[str, set[str]]:
    """rule -> its job's input files, as Snakemake prints every job of a forced dry run."""
    repo, _ = current
    dry_run = run(repo, *ARGS, "--forceall", "--printshellcmds")
    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    found: dict[str, set[str]] = {}
    rule = None
    for line in (dry_run.stdout + dry_run.stderr).splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = m.group(1)
        elif rule and line.strip().startswith("input:"):
            found[rule] = set(line.split(":", 1)[1].strip().split(", "))
            rule = None
    found.pop("all", None)  # the target rule
    return found


# Which stages compute with a module, as its users see it (written out here, not read
# from code_files, so that a closure gone wrong fails); downstream stages and the report
# follow from the declaration.
DIRECT_USERS = {
    "inferlab/algorithms/kernels.py": {"prefill", "decode"},
    "inferlab/measurement/measure.py": {"probe", "prefill", "decode", "model"},  # the harness
    "inferlab/algorithms/attention.py": {"correctness", "prefill", "decode", "model"},
    "inferlab/measurement/process.py": set(STAGES),
    "inferlab/stages/common.py": set(STAGES) - {"claims", "series", "manuscript"},
    "inferlab/judging/claims.py": {"claims", "manuscript"},  # the manuscript reads claims.yaml too
    # claims.yaml is compared by content (test_triggers): its time alone reruns the report
    "claims.yaml": set(),
    "inferlab/presentation/plotting.py": set(),  # presentation: the report only
    # presentation whose text is stored in the manuscript's artifact: its code too
    "inferlab/presentation/formats.py": {"manuscript"},
    "inferlab/presentation/views/prefill.py": set(),  # a stage's view: the report only
    "inferlab/judging/numtext.py": {"claims", "manuscript"},  # claims.json's reasons, the tables
    "scripts/run_stage.py": set(STAGES),  # Snakemake reruns a rule whose script is newer
}


# Everything a stage's run loads besides its computing code, from the list.
BOOKKEEPING_FILES = [
    "inferlab/evidence/register.py",
    "inferlab/evidence/history.py", "inferlab/core/files.py", "inferlab/evidence/artifacts.py",
    "inferlab/evidence/loading.py", "inferlab/core/layout.py", "inferlab/workflow/config.py",
    "inferlab/core/pipeline.py", "inferlab/workflow/runner.py",
    "inferlab/__init__.py", "inferlab/stages/__init__.py",
    "inferlab/measurement/__init__.py", "inferlab/presentation/__init__.py",
]


def _rerun_by(direct: set[str]) -> set[str]:
    """``direct``, every stage downstream of them, and the report."""
    hit = set(direct)
    for name in STAGES:  # declaration order is DAG order
        if hit & set(STAGES[name].reads):
            hit.add(name)
    return hit | {"report"}


def test_each_file_reruns_exactly_the_stages_that_compute_with_it(listed):
    assert set(listed) == {*STAGES, "report"}
    for rel, direct in DIRECT_USERS.items():
        users = {name for name, files in listed.items() if rel in files}
        assert users - {"report"} == direct, rel
        assert "report" in users or direct, f"{rel}: its change would rerun nothing"
    for rel in BOOKKEEPING_FILES:
        assert not any(rel in files for files in listed.values()), rel


def test_the_stages_that_read_the_registers_declare_them(listed):
    """The series pools the register's runs and the manuscript names their commits: the
    register is their input (``ancient``: a measured stage appends to it)."""
    register = layout.register_path(".", KEY).as_posix()
    assert {name for name, files in listed.items() if register in files} == \
        {name for name, s in STAGES.items() if s.reads_register}


def test_bookkeeping_reruns_nothing_and_code_its_stages_and_what_follows(current):
    """The real thing, once each way: every bookkeeping module edited at once leaves
    nothing to do; a computing module touched reruns its stages, all downstream and the
    report; a register appended to reruns nothing (ancient)."""
    repo, old = current
    edited = {rel: (repo / rel).read_text() for rel in BOOKKEEPING_FILES}
    for rel, text in edited.items():
        (repo / rel).write_text(text + "\n# an edited message\n")
    os.utime(layout.register_path(repo, KEY))
    try:
        assert jobs(run(repo, *ARGS)) == set()
    finally:
        for rel, text in edited.items():
            (repo / rel).write_text(text)
            os.utime(repo / rel, (old, old))
    rel = "inferlab/algorithms/kernels.py"
    os.utime(repo / rel)  # now: newer than the outputs
    try:
        assert jobs(run(repo, *ARGS)) == _rerun_by(DIRECT_USERS[rel])
    finally:
        os.utime(repo / rel, (old, old))


def test_restating_a_default_reruns_nothing(current):
    """``--config seed=0`` is config.yaml's own seed: the same effective config and the
    same reproduce command, so no params changed (the command was a trigger)."""
    repo, _ = current
    assert jobs(run(repo, *ARGS, "seed=0")) == set()
    assert "prefill" in jobs(run(repo, *ARGS, "seed=1"))


def test_a_claims_note_reruns_the_report_only(current):
    """claims.yaml is compared by what a stage computes from it (each claim's id, kind and
    check: ``params.computed_from``): the report shows the notes, claims.json holds none."""
    repo, old = current
    path = repo / "claims.yaml"
    text = path.read_text(encoding="utf-8")
    note = "    note: >-\n      "
    assert note in text
    try:
        path.write_text(text.replace(note, note + "Reworded. ", 1), encoding="utf-8")
        assert jobs(run(repo, *ARGS)) == {"report"}
    finally:
        path.write_text(text, encoding="utf-8")
        os.utime(path, (old, old))


def test_the_snakefile_has_one_rule_per_stage_wired_as_declared(current):
    repo, _ = current
    graph = run(repo, *ARGS, "--rulegraph", "--forceall")
    assert graph.returncode == 0, graph.stderr[-3000:]
    names = dict(re.findall(r'(\d+)\[label = "(\w+)"', graph.stdout))
    assert set(names.values()) == {*STAGES, "report", "all"}
    wired = {(names[a], names[b]) for a, b in re.findall(r"(\d+) -> (\d+)", graph.stdout)}
    declared = {(up, name) for name, s in STAGES.items() for up in s.reads}
    assert {e for e in wired if e[1] in STAGES} == declared
    assert ("claims", "report") in wired and ("report", "all") in wired


def test_stage_rules_hand_the_effective_config_and_threads(current):
    repo, _ = current
    out = run(repo, *ARGS, "--forceall", "--printshellcmds", "prefill").stdout
    block = out.split("rule prefill:", 1)[1].split("\n\n", 1)[0]
    assert "threads: 2" in block and "machine=2" in block  # a timing stage runs alone


TOY_MODULE = '''"""toy -> toy.csv: a stage a test adds, to see the declaration reach everything."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    @classmethod
    def from_config(cls, cfg):
        return cls()


def run(params, ctx):
    return [{"n": 1}]
'''
TOY_SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "inferlab/toy",
              "type": "object", "additionalProperties": False, "required": ["n"],
              "properties": {"n": {"description": "one", "type": "integer"}}}


def test_a_new_stage_declared_once_appears_everywhere(tmp_path):
    """A toy stage in a temporary copy: its declaration line, its module and its schema;
    then ``inferlab generate`` writes the schema enums, the Slurm profile and the docs'
    tables, and the Snakefile, ``inferlab stage --help`` and the claims stage's inputs
    follow by themselves."""
    repo = copy_repo(tmp_path / "repo")
    pipeline = repo / "inferlab" / "core" / "pipeline.py"
    text = pipeline.read_text(encoding="utf-8")
    anchor = '    Stage("model", table=True'
    assert anchor in text
    pipeline.write_text(text.replace(anchor, '    Stage("toy", table=True, configured=False),\n'
                                     + anchor), encoding="utf-8")
    (repo / "inferlab" / "stages" / "toy.py").write_text(TOY_MODULE, encoding="utf-8")
    (repo / "schemas" / "toy.schema.json").write_text(json.dumps(TOY_SCHEMA), encoding="utf-8")
    assert run(repo, "generate", "--check", module="inferlab").returncode == 1
    assert run(repo, "generate", module="inferlab").returncode == 0
    sidecar = json.loads((repo / "schemas" / "sidecar.schema.json").read_text())
    assert "toy.csv" in sidecar["properties"]["artifact"]["enum"]
    slurm = yaml.safe_load((repo / "profiles" / "slurm" / "config.yaml").read_text())
    assert "toy" in slurm["set-resources"]
    assert "`toy`" in (repo / "docs" / "contracts.md").read_text()
    # its report caption is its module's docstring: no file of its own to write
    assert (repo / "captions" / "toy.rst").read_text() == \
        "A stage a test adds, to see the declaration reach everything.\n"
    assert "toy" in run(repo, "stage", "--help", module="inferlab").stdout
    assert "toy" in jobs(run(repo, "--dry-run", "--cores", "1", "--config", "machine=toy-box"))
