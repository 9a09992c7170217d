"""Rerun triggers exactly right, both ways: an edit that changes an artifact's bytes reruns
that stage (and what follows), an edit that changes none reruns nothing. Each case edits
a file in a temporary copy of the repository whose outputs are all current, then asks
``snakemake --dry-run`` what it would run."""

from __future__ import annotations

import os
import time

import pytest

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from tests.pipeline_repo import copy_repo, jobs, run

KEY = "test-triggers"
ARGS = ["--dry-run", "--cores", "2", "--config", f"machine={KEY}"]


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    """A copy whose every output exists and is newer than every other file."""
    repo = copy_repo(tmp_path_factory.mktemp("triggers"))
    old, made = time.time() - 3000, time.time() - 2000
    for path in repo.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    outputs = [layout.report_path(repo)]
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


def test_restating_a_default_reruns_nothing(current):
    """``--config seed=0`` is config.yaml's own seed: the same effective config and the
    same reproduce command, so no params changed (the command was a trigger)."""
    repo, _ = current
    assert jobs(run(repo, *ARGS, "seed=0")) == set()
    assert "prefill" in jobs(run(repo, *ARGS, "seed=1"))


def test_the_audit_text_the_report_shows_reruns_the_report_only(current):
    repo, old = current
    audit = repo / "inferlab" / "presentation" / "audit.py"
    os.utime(audit)
    try:
        assert jobs(run(repo, *ARGS)) == {"report"}
    finally:
        os.utime(audit, (old, old))


def test_a_claims_note_reruns_the_report_only(current):
    """claims.yaml is compared by what a stage computes from it (each claim's id, kind and
    check: ``params.computed_from``, tests/test_pipeline.py edits a check): the report
    shows the sentences and notes, claims.json holds none of them."""
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


def test_stages_that_read_the_register_declare_it(current):
    """The series pools the register's runs and the manuscript names their commits: the
    register is their input (``ancient``: every stage appends to it, which is no change
    to what they read)."""
    repo, _ = current
    register = layout.register_path(repo, KEY)
    register.parent.mkdir(parents=True, exist_ok=True)
    register.write_text("")
    for name in ("series", "manuscript"):
        assert STAGES[name].reads_register
        out = run(repo, *ARGS, "--forcerun", name, "--printshellcmds", name)
        block = out.stdout.split(f"rule {name}:", 1)[1].split("\n\n", 1)[0]
        assert layout.register_path(".", KEY).as_posix() in block, block
    os.utime(register)  # a stage appended: nothing to redo
    assert jobs(run(repo, *ARGS)) == set()


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
    import json

    import yaml

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
    assert run(repo, "generate", "--check", module="inferlab").returncode == 0
    schemas = {f: json.loads((repo / "schemas" / f).read_text()) for f in (
        "sidecar.schema.json",)}
    assert "toy.csv" in schemas["sidecar.schema.json"]["properties"]["artifact"]["enum"]
    slurm = yaml.safe_load((repo / "profiles" / "slurm" / "config.yaml").read_text())
    assert "toy" in slurm["set-resources"]
    assert "`toy`" in (repo / "docs" / "contracts.md").read_text()
    # its report caption is its module's docstring: no file of its own to write
    assert (repo / "captions" / "toy.rst").read_text() == \
        "A stage a test adds, to see the declaration reach everything.\n"
    assert "toy" in run(repo, "stage", "--help", module="inferlab").stdout
    rules = run(repo, "--list-rules").stdout.split()
    assert "toy" in rules
    assert "toy" in jobs(run(repo, "--dry-run", "--cores", "1", "--config", "machine=toy-box"))
