"""The one place that imports ``jsonschema``: lazily, so the library loads without it.

Config, artifacts and claims are checked against their JSON schemas (``schemas/``) with
a Draft 2020-12 validator made here. ``jsonschema`` is imported on the first check, not
when ``inferlab`` loads: on the lent GPU machine it is not in the image and arrives as
carried wheels installed into a folder on ``PYTHONPATH`` (``scripts/gpu-call.sh``,
docs/gpu-run.md). Where it is missing, a check is never skipped silently: it raises an
error that says how to install it.
"""

from __future__ import annotations

import importlib
from typing import Any

MISSING = ("jsonschema is not importable, and every config, artifact and claims file is "
           "checked against its schema: pip install 'jsonschema>=4.18' (make setup); on the "
           "lent GPU machine, carry gpu-wheels/ and let scripts/gpu-call.sh install it "
           "(docs/gpu-run.md)")


def _jsonschema():
    try:
        return importlib.import_module("jsonschema")
    except ImportError as exc:
        raise ModuleNotFoundError(f"{MISSING} ({exc})") from exc


def _is_integer(checker, instance) -> bool:
    """JSON Schema counts 1.0 as an integer; torch.manual_seed(1.0) and range(1.0) do not."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def validator(schema: dict, strict_integers: bool = False) -> Any:
    """A ``jsonschema.Draft202012Validator`` for ``schema``; with ``strict_integers`` an
    "integer" is a Python int only (a config's seed=1.0 is refused, not passed on)."""
    js = _jsonschema()
    if not strict_integers:
        return js.Draft202012Validator(schema)
    checker = js.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
    return js.validators.extend(js.Draft202012Validator, type_checker=checker)(schema)


def best_match(errors) -> Any:
    """jsonschema's most relevant error among ``errors`` (an iterable), or None."""
    return _jsonschema().exceptions.best_match(errors)
