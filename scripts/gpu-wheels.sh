#!/usr/bin/env bash
# The wheels the lent GPU machine lacks (docs/gpu-run.md): its image has torch, Triton,
# numpy, pandas, pyyaml, jinja2, matplotlib, pytest and attrs, but not jsonschema and
# what jsonschema needs, and no registry is reachable there. They are downloaded here for
# its Python (CPython 3.12, manylinux x86-64) into gpu-wheels/ (git-ignored), carried
# with the call, and installed there by scripts/gpu-call.sh with pip --no-index --target.
#
#   bash scripts/gpu-wheels.sh [DIR]       # default gpu-wheels/; needs PyPI, ~0.6 MB
#
# The versions are the ones the tests here run with; --no-deps, so each need is named.
# attrs and typing-extensions are in the image too; carried so that jsonschema's
# attrs>=22.2 and referencing's typing-extensions>=4.4 (TypeVar's default=) hold whatever
# the image's are. snakemake is not carried: the script runs each stage with
# `python -m inferlab stage NAME`. Exit status: 0 done; 3 the registry could not be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-gpu-wheels}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
WHEELS="jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
        rpds-py==2026.9.1 attrs==26.1.0 typing-extensions==4.16.0"
mkdir -p "$DIR.partial"
# shellcheck disable=SC2086 # WHEELS is a list of words
if ! "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DIR.partial" $WHEELS; then
  echo "gpu-wheels: pip could not download $WHEELS (is PyPI reachable?)" >&2
  rm -rf "$DIR.partial"
  exit 3
fi
rm -rf "$DIR" && mv "$DIR.partial" "$DIR"
ls -l "$DIR"
