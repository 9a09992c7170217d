"""Private strings kept out of the environment fingerprint: the home path, the user and
the host name that a tool (collect_env, nvidia-smi) may echo back are replaced by
``<redacted>`` before the fingerprint is written into any artifact."""

from __future__ import annotations

import getpass
import os
import socket
from typing import Any


def scrub(value: Any, secrets: list[str]) -> Any:
    """Replace any private string (home path, user, host) that a tool echoed back."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "<redacted>")
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, secrets) for v in value]
    return value


def private_strings() -> list[str]:
    found = [os.path.expanduser("~"), socket.gethostname()]
    try:
        found.append(getpass.getuser())
    except (KeyError, OSError):
        pass  # no user database entry (common in containers): nothing to hide
    # Longest first so a home path is replaced before the user name inside it;
    # very short names would redact ordinary words, so they are left alone.
    return sorted({s for s in found if s and len(s) >= 4 and s != "/"}, key=len, reverse=True)
