#!/usr/bin/env bash
# The first GPU run in one command (docs/gpu-run.md), made for the lent H200 as it is:
# its own python3 (3.12), torch 2.11 and Triton 3.6, no registry, no snakemake. What the
# project needs beyond the image (jsonschema and its needs) comes as wheels in gpu-wheels/
# (scripts/gpu-wheels.sh), installed with pip --no-index --target into an empty folder.
#
#   bash scripts/gpu-check.sh             # on the GPU: book grid, ncu bytes, kernel tests
#   OUT=$(mktemp -d) bash scripts/gpu-check.sh --dry-run   # here, on a CPU: smoke grid
#
# Each stage runs as `python -m inferlab stage NAME` (no snakemake), the claims-deciding
# timings first, each under its own limit and all under GPU_CHECK_BUDGET_S (default 320
# s, so that the run and one rerun fit the 15-minute lease). $OUT (else logs/gpu-check-out/)
# receives exactly two files, within the lent machine's limits (at most 8 files, 16 MiB
# each, names of [A-Za-z0-9._-], at most two folders deep), checked at the end:
#   evidence.tar.gz  results/<key>/, evidence/<key>/, logs/<key>/ and logs/gpu-check/
#                    (step logs, preflight.txt, steps.txt, ncu-bytes.csv), re-packed after
#                    EVERY step, so a run killed at its limit keeps what finished
#   summary.log      one line per step and the $OUT check
# --dry-run: the same steps on this CPU with profiles/smoke.yaml, the network refused to
# pip, and no test steps; the $OUT check failing fails the run.
# GPU_CHECK_STAGES="claims ncu" runs only those (a rerun), GPU_CHECK_TESTS=0 no tests,
# GPU_CHECK_BUDGET_S the budget, PYTHON another interpreter.
# Exit status: 0 every step passed; 1 a step failed, was skipped or $OUT breaks a limit;
# 2 nothing was measured (no GPU torch can use, or the carried wheels do not install).
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac
if [ -n "${GPU_CHECK_PARENT:-}" ]; then  # a test it runs must not start it again
  echo "gpu-check: already running (process $GPU_CHECK_PARENT); not nesting" >&2
  exit 2
fi
export GPU_CHECK_PARENT=$$ PYTHONUNBUFFERED=1

OUT_DIR=${OUT:-logs/gpu-check-out}
WORK=logs/gpu-check          # step logs; packed into the tarball, never into $OUT itself
WHEELS=${GPU_CHECK_WHEELS:-gpu-wheels}
SITE=${GPU_CHECK_SITE:-/tmp/inferlab-site}
BUDGET_S=${GPU_CHECK_BUDGET_S:-320}
STAGES=${GPU_CHECK_STAGES:-probe prefill decode correctness traffic model claims ncu}
unset TRITON_INTERPRET       # the stages time compiled kernels; the interpreter is for tests
KILL_AFTER_S=10
if (( DRY )); then
  PROFILE=profiles/smoke.yaml
  if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
  elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
  else PY=python3; fi
else
  PROFILE=profiles/book.yaml
  PY=${PYTHON:-python3}      # the image's: /opt/torch/.venv/bin/python3 on the H200
fi
START=$(date +%s)
FAILED=0
KEY=unknown
mkdir -p "$OUT_DIR" "$WORK"
rm -f "$WORK"/*.log "$WORK"/*.txt "$WORK"/*.csv
SUMMARY="$OUT_DIR/summary.log"
: > "$SUMMARY"
: > "$WORK/steps.txt"

say() { echo "[gpu-check +$(( $(date +%s) - START ))s] $*" | tee -a "$SUMMARY" >&2; }

pack() {  # the evidence so far, replaced atomically (a kill mid-tar leaves the last one)
  local tmp="$OUT_DIR/evidence.tar.gz.part"
  tar czf "$tmp" --ignore-failed-read --exclude="$OUT_DIR" "results/$KEY" \
    "evidence/$KEY" "logs/$KEY" "$WORK" 2> /dev/null
  mv -f "$tmp" "$OUT_DIR/evidence.tar.gz"
}

# run_step NAME LIMIT_S COMMAND...: at most LIMIT_S (less if the budget has less left,
# keeping room for the kill and the pack), output to $WORK/NAME.log, one line in
# steps.txt and summary.log, then the tarball re-packed. SIGINT first, SIGKILL
# KILL_AFTER_S later: a stage interrupted leaves no artifact (the runner writes at the end).
run_step() {
  local name=$1 limit=$2 room t0 rc
  shift 2
  room=$(( BUDGET_S - ($(date +%s) - START) - KILL_AFTER_S - 10 ))
  (( limit > room )) && limit=$room
  if (( limit < 15 )); then
    say "SKIP $name: $(( room + KILL_AFTER_S + 10 ))s of the ${BUDGET_S}s budget left"
    echo "$name skipped (no time left)" >> "$WORK/steps.txt"
    FAILED=1
    return 1
  fi
  t0=$(date +%s)
  timeout --signal=INT --kill-after=$KILL_AFTER_S "$limit" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  echo "$name exit=$rc seconds=$(( $(date +%s) - t0 )) limit=$limit" >> "$WORK/steps.txt"
  say "$name: exit $rc after $(( $(date +%s) - t0 ))s (at most ${limit}s)$(
    (( rc == 124 )) && echo ': TIMED OUT')$( (( rc != 0 )) && echo "; tail: $(tail -n 1 \
    "$WORK/$name.log" | cut -c1-200)")"
  (( rc == 0 )) || FAILED=1
  pack
  return $rc
}

# 0. A CUDA machine whose torch sees the GPU? If not: why, and nothing is run (before the
# wheels: a machine without a GPU needs none). inferlab.measurement.environment needs no jsonschema.
if (( ! DRY )); then
  if ! command -v nvidia-smi > /dev/null 2>&1 && [ ! -e /proc/driver/nvidia/version ]; then
    say "no NVIDIA driver here (no nvidia-smi on the PATH, no /proc/driver/nvidia): this script measures a CUDA machine, so nothing was run"
    exit 2
  fi
  nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1
  if ! "$PY" - > "$WORK/gpu.txt" 2>&1 <<'PY'
import sys
from inferlab.measurement.environment import default_device
try:
    device = default_device()  # the reason and the fix if torch cannot see the GPU
except ValueError as exc:
    sys.exit(str(exc))
if device != "cuda":
    import torch
    sys.exit(f"torch {torch.__version__} sees no CUDA device here (device {device})")
PY
  then
    say "not a usable CUDA machine, nothing was run: $(tail -n 1 "$WORK/gpu.txt")"
    pack
    exit 2
  fi
fi

# 1. The carried wheels, installed for the device's Python (CPython 3.12, manylinux
# x86-64) into an empty folder, no index, the network refused.
rm -rf "$SITE"
if ! compgen -G "$WHEELS/*.whl" > /dev/null; then
  say "no wheels in $WHEELS/: make them with bash scripts/gpu-wheels.sh and carry the folder"
  exit 2
fi
if ! env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_NO_INDEX=1 \
    PIP_CONFIG_FILE=/dev/null http_proxy=http://127.0.0.1:9 \
    https_proxy=http://127.0.0.1:9 "$PY" -m pip install -q --disable-pip-version-check \
    --no-index --no-deps --no-compile --no-cache-dir --only-binary=:all: --target "$SITE" \
    --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$WHEELS"/*.whl \
    > "$WORK/install.log" 2>&1; then
  say "the carried wheels did not install (nothing was run): $(tail -n 1 "$WORK/install.log")"
  exit 2
fi
# The folder goes on PYTHONPATH where the wheels can load: CPython 3.12 (the device's).
# A dry run under another Python checks the import with a local python3.12 instead.
# (GPU_CHECK_PY312 names it, default python3.12.)
CHECK_PY=$PY
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' \
  || CHECK_PY=${GPU_CHECK_PY312:-python3.12}
if ! "$CHECK_PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2> /dev/null; then
  say "installed $(ls "$SITE" | grep -c dist-info) wheels into $SITE; import not checked (no CPython 3.12 here: set GPU_CHECK_PY312)"
elif ! PYTHONPATH=$SITE "$CHECK_PY" -s -c "
import sys, jsonschema
assert jsonschema.__file__.startswith(sys.argv[1]), jsonschema.__file__
jsonschema.Draft202012Validator({'type': 'integer'}).validate(3)" "$SITE" \
    >> "$WORK/install.log" 2>&1; then
  say "the carried wheels do not import under $CHECK_PY (nothing was run): $(tail -n 1 "$WORK/install.log")"
  exit 2
else
  say "carried wheels installed into $SITE (no index) and imported by $CHECK_PY"
fi
if [ "$CHECK_PY" = "$PY" ]; then export PYTHONPATH=$PWD:$SITE
else export PYTHONPATH=$PWD; fi  # this Python's own jsonschema: its cp312 wheel cannot load

# 2. Preflight: versions, the GPU, the results key.
if ! DRY=$DRY PROFILE=$PROFILE "$PY" - > "$WORK/preflight.txt" 2>&1 <<'PY'
import os, platform, shutil, sys
from importlib import metadata

print("python", platform.python_version(), sys.executable)
for dist in ("torch", "triton", "numpy", "pandas", "pyyaml", "jsonschema", "rpds-py"):
    try:
        print(dist, metadata.version(dist))
    except metadata.PackageNotFoundError:
        print(dist, "MISSING")
from inferlab.workflow.config import load_config, resolve
from inferlab.measurement.environment import default_device
try:
    device = default_device()  # the reason and the fix if torch cannot see the GPU
    key = resolve(load_config([os.environ["PROFILE"]])).key
except ValueError as exc:
    sys.exit(str(exc))
import torch
if device != "cuda" and os.environ["DRY"] != "1":
    sys.exit(f"torch {torch.__version__} sees no CUDA device here (device {device})")
if device == "cuda":
    print("device", torch.cuda.get_device_name(0), "capability",
          torch.cuda.get_device_capability(0), "cuda", torch.version.cuda)
import jsonschema
print("jsonschema from", jsonschema.__file__)
print("ncu", shutil.which("ncu"))
print("C compiler (Triton builds a helper with it)", shutil.which("cc") or shutil.which("gcc"))
from inferlab.algorithms.kernels import triton_status
print("kernels", triton_status())
print("key", key)
PY
then
  say "not a usable machine, nothing was run: $(tail -n 1 "$WORK/preflight.txt")"
  pack
  exit 2
fi
KEY=$(sed -n 's/^key //p' "$WORK/preflight.txt")
say "key $KEY; $PROFILE; $("$PY" --version 2>&1); $(grep -E '^(torch|triton|jsonschema) ' \
  "$WORK/preflight.txt" | tr '\n' ' ')budget ${BUDGET_S}s"
pack

# 3. The stages, the claims-deciding timings first (probe feeds prefill and decode), each
# limit its worst case on the H200 (docs/gpu-run.md); GPU_CHECK_STAGES picks some for a
# rerun (their inputs must be in results/<key>/: unpack the first run's tarball first).
for item in probe:45 prefill:130 decode:100 correctness:40 traffic:20 model:20 claims:25; do
  case " $STAGES " in *" ${item%%:*} "*) ;; *) continue ;; esac
  run_step "stage-${item%%:*}" "${item##*:}" "$PY" -m inferlab stage "${item%%:*}" \
    --configfile "$PROFILE"
done

# 4. DRAM bytes per kernel with Nsight Compute, at one length (inferlab.measurement.ncu): where ncu
# cannot read the counters, ncu-bytes.csv says why in its status column.
NCU_T=$( (( DRY )) && echo 64 || echo 4096 )
case " $STAGES " in *" ncu "*)
  run_step ncu 60 "$PY" -m inferlab.measurement.ncu run --tokens "$NCU_T" --out "$WORK/ncu-bytes.csv" ;;
esac

# 5. The compiled kernels' exactness tests and the quick CUDA tests, in what time is left.
if (( DRY )); then
  say "tests-kernels, tests-cuda: not run in a dry run (the CPU suite runs them here)"
elif [ "${GPU_CHECK_TESTS:-1}" = 1 ]; then
  run_step tests-kernels 100 env TRITON_INTERPRET=0 "$PY" -m pytest -q -rs \
    -p no:cacheprovider tests/test_kernels.py
  run_step tests-cuda 45 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_clocks.py \
    tests/test_cuda_clock.py tests/test_backends.py tests/test_measure.py \
    tests/test_attention.py
fi

# 6. What comes back must fit: checked, and the result in summary.log (inside $OUT).
say "steps: $(tr '\n' ';' < "$WORK/steps.txt")"
pack
if ! "$PY" scripts/check-out.py "$OUT_DIR" >> "$SUMMARY" 2>&1; then
  FAILED=1
fi
tail -n 1 "$SUMMARY" >&2
say "done, exit $FAILED"
exit $FAILED
