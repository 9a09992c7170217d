"""The session's check that the tests leave the checkout as they found it (conftest.py)."""

from __future__ import annotations

from tests.conftest import checkout_status, left_behind
from tests.pipeline_repo import commit, copy_repo


def test_only_the_venv_and_caches_may_be_left_behind():
    before = {"!! .venv", "?? notes.txt"}
    after = before | {"!! .hypothesis/", "!! .ruff_cache/", "!! .pytest_cache/",
                      "!! inferlab/__pycache__/", "!! .snakemake/", "?? results/x/",
                      " M config.yaml"}
    assert left_behind(before, after) == [" M config.yaml", "!! .snakemake/",
                                          "?? results/x/"]


def test_status_is_read_at_the_top_of_a_checkout_only(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    (repo / "tests").mkdir(exist_ok=True)
    assert checkout_status(repo) is None  # not a git checkout
    commit(repo, "code")
    assert checkout_status(repo) == set()
    (repo / ".snakemake").mkdir()
    (repo / ".snakemake" / "log").write_text("x")
    assert left_behind(set(), checkout_status(repo)) == ["!! .snakemake/"]
    assert checkout_status(repo / "tests") is None  # inside it, not its top (mutmut's copy)
