"""The one place that imports ``jsonschema``: lazily, so the library loads without it.

Config, artifacts and claims are checked against their JSON schemas (``schemas/``) with
a Draft 2020-12 validator made here. ``jsonschema`` is imported on the first check, not
when ``inferlab`` loads: on the lent GPU machine it is not in the image and arrives as
carried wheels installed into a folder on ``PYTHONPATH`` (``scripts/gpu-check.sh``,
docs/gpu-run.md). Where it is missing, a check is never skipped silently: it raises an
error that says how to install it.
"""

from __future__ import annotations

import importlib
from typing import Any

MISSING = ("jsonschema is not importable, and every config, artifact and claims file is "
           "checked against its schema: pip install 'jsonschema>=4.18' (make setup); on the "
           "lent GPU machine, carry gpu-wheels/ and let scripts/gpu-check.sh install it "
           "(docs/gpu-run.md)")


def _jsonschema():
    try:
        return importlib.import_module("jsonschema")
    except ImportError as exc:
        raise ModuleNotFoundError(f"{MISSING} ({exc})") from exc


def validator(schema: dict) -> Any:
    """A ``jsonschema.Draft202012Validator`` for ``schema``."""
    return _jsonschema().Draft202012Validator(schema)


def best_match(errors) -> Any:
    """jsonschema's most relevant error among ``errors`` (an iterable), or None."""
    return _jsonschema().exceptions.best_match(errors)
