"""A fresh clone of a repository with committed evidence, as a new user (and an attacker)
finds it: ``make setup && make evidence``, the smoke profile beside the book evidence,
and every tampering that ``inferlab adopt`` must not trust.

The repository is small (``pipeline_repo.book_repo``): this project with the smoke sizes
as its book grid (one prefill length apart, so the smoke profile is still another grid),
its evidence made for the machine detected here and committed, so that a clone's
committed evidence is current and adopt can take it. What that does not cover: ``make
setup`` installing into a new venv (the clone uses the running venv through ``VENV``,
with the setup stamp already newer than pyproject.toml, so setup is a no-op), and the
real book grid's four minutes of stages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.presentation import audit
from tests.pipeline_repo import book_key, book_repo, env, git, run, tree_hashes
from tests.tampering import delete_tail, forge, rollback_results

pytestmark = pytest.mark.slow

VENV = Path(sys.prefix)


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    return book_repo(tmp_path_factory.mktemp("book") / "repo")


def clone(book: Path, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(book), str(dest)], check=True)
    return dest


def make(repo: Path, *targets: str) -> subprocess.CompletedProcess:
    """The Makefile's targets in ``repo``, with this venv and its setup stamp satisfied."""
    stamp = repo.parent / f"{repo.name}.stamp"
    stamp.touch()  # newer than the clone's pyproject.toml: setup has nothing to do
    return subprocess.run(["make", *targets, f"VENV={VENV}", f"STAMP={stamp}", "CORES=1"],
                          cwd=repo, env=env(repo), capture_output=True, text=True,
                          timeout=600)


def adopt(repo: Path) -> str:
    result = run(repo, "adopt", module="inferlab")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# ------------------------------------------------------------------ the newcomer's path


@pytest.mark.parametrize("n", [1, 2])
def test_make_setup_and_evidence_on_a_fresh_clone_twice(book, tmp_path, n):
    """The README's first command, right after cloning (no sleep), then again. It once
    failed on adopt's mtimes in the future and deleted the committed report."""
    repo = clone(book, tmp_path / f"clone{n}")
    key = book_key(repo)
    register = layout.register_path(repo, key).read_bytes()
    first = make(repo, "setup", "evidence")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    assert first.stdout.count("adopted (current)") == len(STAGES), first.stdout
    assert layout.register_path(repo, key).read_bytes() == register  # no stage reran
    assert layout.report_path(repo).stat().st_size > 0
    second = make(repo, "setup", "evidence")
    assert second.returncode == 0, second.stderr[-4000:]
    assert "Nothing to be done" in second.stdout + second.stderr
    assert git(repo, "status", "--porcelain", "--", "results", "evidence") == ""


def test_smoke_after_book_evidence_keeps_it(book, tmp_path, capsys):
    repo = clone(book, tmp_path / "clone")
    key = book_key(repo)
    before = {d: tree_hashes(repo / d / key) for d in ("results", "evidence")}
    smoke = run(repo, "--cores", "1", "--configfile", "profiles/smoke.yaml")
    assert smoke.returncode == 0, smoke.stderr[-4000:]
    assert {d: tree_hashes(repo / d / key) for d in before} == before
    assert git(repo, "status", "--porcelain", "--", "results", "evidence") == \
        f"?? evidence/{key}@smoke/\n?? results/{key}@smoke/\n"
    recorded = json.loads(layout.artifact_path(repo, f"{key}@smoke", "claims").read_text())
    assert (recorded["machine"], recorded["grid"]) == (key, "smoke")
    claims = run(repo, "claims", module="inferlab")
    assert claims.returncode == 0, claims.stdout + claims.stderr
    heads = [line.split(":")[0] for line in claims.stdout.splitlines()
             if line.startswith("machine ")]  # one block per key, each saying its grid
    assert heads == [f"machine {key}, grid book (config.yaml)", f"machine {key}@smoke, grid smoke"]


# ------------------------------------------------------------------ what adopt must not trust


def _tampered(book: Path, tmp_path: Path, tamper) -> tuple:
    """A fresh clone, tampered with: (clone, key, adopt's output, verify's result)."""
    repo = clone(book, tmp_path / "clone")
    key = book_key(repo)
    tamper(repo, key)
    return repo, key, adopt(repo), run(repo, "verify", module="inferlab")


def _edit_sidecar(repo, key):
    sidecar = layout.sidecar_path(layout.artifact_path(repo, key, "prefill"))
    sidecar.write_text(sidecar.read_text().replace('"seed": 0', '"seed": 1', 1))


def _swap_sidecar(repo, key):
    rollback_results(repo, key, "traffic", 1)  # then put v2's artifact back: only the
    rollback = layout.artifact_path(repo, key, "traffic")  # sidecar is the older one
    rollback.write_bytes(git(repo, "show", f"HEAD:{rollback.relative_to(repo)}").encode())


DOWNSTREAM_OF_TRAFFIC = ("traffic", "claims", "manuscript")  # their v2 close the register


def _delete_tail_with_rollback(repo, key):
    delete_tail(repo, key, len(DOWNSTREAM_OF_TRAFFIC))
    for stage in DOWNSTREAM_OF_TRAFFIC:
        rollback_results(repo, key, stage, 1)


def _forge_after_head(repo, key):
    path = layout.artifact_path(repo, key, "traffic")
    forge(repo, key, "traffic", path.read_bytes().replace(b",", b", ", 1))


@pytest.mark.parametrize(("tamper", "stage", "why", "verify_rc"), [
    (_edit_sidecar, "prefill", "prefill.csv.prov.json matches no registered version", 1),
    (_swap_sidecar, "traffic", "traffic.csv.prov.json is version 1 of traffic, but the "
                               "register's latest is version 2", 1),
    # one entry per stage, then traffic v2, claims v2 and manuscript v2: those are deleted
    (_delete_tail_with_rollback, "probe",
     f"entries {len(STAGES) + 1}-{len(STAGES) + len(DOWNSTREAM_OF_TRAFFIC)} were deleted", 1),
    # undetectable by verify (a run made here looks the same); adopt still will not trust it
    (_forge_after_head, "traffic", "version 3 was registered after the last commit", 0),
], ids=["sidecar edit", "sidecar swap", "tail deletion with rollback", "forged entry"])
def test_adopt_reruns_what_it_cannot_trust(book, tmp_path, tamper, stage, why, verify_rc):
    _, _, adopted, verify = _tampered(book, tmp_path, tamper)
    line = next(line for line in adopted.splitlines() if f": {stage}: " in line)
    assert "will rerun" in line and why in line, adopted
    assert "claims: will rerun" in adopted
    assert verify.returncode == verify_rc, verify.stdout


def test_an_edited_claims_json_is_marked(book, tmp_path):
    def edit(repo, key):
        path = layout.artifact_path(repo, key, "claims")
        data = json.loads(path.read_text())
        data["claims"][0]["verdict"] = "reproduced"
        data["claims"][0]["value"] = 1.24
        path.write_text(json.dumps(data, indent=2))

    repo, key, adopted, verify = _tampered(book, tmp_path, edit)
    assert "claims: will rerun: results/" in adopted and verify.returncode == 1
    claims = run(repo, "claims", module="inferlab")
    assert claims.returncode == 1 and f"{key} !" in claims.stdout
    assert "MISMATCH claims:" in claims.stdout
    evidence = audit.load_evidence(repo, key, "claims")
    assert audit.integrity(repo, key, evidence)["status"] == "MISMATCH"  # what the report shows
