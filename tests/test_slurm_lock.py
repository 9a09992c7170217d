"""The local Slurm cluster's session lock (tests/slurm_cluster.py): one test session on the
cluster at a time across processes (its ports are fixed; a second suite that found it
running lost it when the first stopped it), and re-entrant inside one process (each test
module importing ``slurm_cluster`` has a session fixture of its own: a second flock of
the same file in one process waited for ever, both xdist workers idle)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.slurm_cluster import _HELD, _session_lock

TRY_LOCK = textwrap.dedent("""
    import fcntl, sys
    with open(sys.argv[1], "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(3)
""")


def _other_process_gets(path) -> bool:
    done = subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], timeout=30)
    assert done.returncode in (0, 3), done
    return done.returncode == 0


def test_the_lock_is_reentrant_in_a_process_and_excludes_another(tmp_path):
    # a lock of its own path: the cluster's own (a session fixture) may be held in this
    # worker while this test runs
    path = tmp_path / "cluster.lock"
    with _session_lock(str(path)):
        with _session_lock(str(path)):  # a second module's fixture: no wait
            assert _HELD[str(path)][1] == 2
            assert not _other_process_gets(path)
        assert not _other_process_gets(path)  # the first user still holds it
    assert str(path) not in _HELD
    assert _other_process_gets(path)  # released with the last user
