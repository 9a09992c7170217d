#!/usr/bin/env bash
# The first GPU run in one command (docs/gpu-run.md): check that torch sees this machine's
# NVIDIA GPU, run the quick CUDA tests, the book grid's stages on the GPU (claims-deciding
# stages first), then the compiled Triton kernel tests, all within GPU_CHECK_BUDGET_S
# (default 570 s), and pack what to send back.
#
#   bash scripts/gpu-check.sh          # from anywhere; runs in the repository root
#
# Python: $PYTHON, else .venv/bin/python, else python3. Output: $OUT (set by a lent-device
# runner), else logs/gpu-check/. Exit status: 0 every step passed; 2 not a usable CUDA
# machine (nothing was run); 1 a step failed or ran out of time (the rest still ran, and
# what finished is packed). GPU_CHECK_REHEARSE=1 runs every step on a CPU with the smoke
# grid instead (results/<cpu>@smoke/), to try this script itself without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${GPU_CHECK_PARENT:-}" ]; then  # a test it runs must not start it again
  echo "gpu-check: already running (process $GPU_CHECK_PARENT); not nesting" >&2
  exit 2
fi
export GPU_CHECK_PARENT=$$

OUT_DIR=${OUT:-logs/gpu-check}
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi
BUDGET_S=${GPU_CHECK_BUDGET_S:-570}
REHEARSE=${GPU_CHECK_REHEARSE:-0}
if [ "$REHEARSE" = 1 ]; then PROFILE=profiles/smoke.yaml; else PROFILE=profiles/book.yaml; fi
START=$(date +%s)
FAILED=0
mkdir -p "$OUT_DIR"
: > "$OUT_DIR/steps.txt"

say() { echo "[gpu-check +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT_DIR/gpu-check.log" >&2; }

# run_step NAME LIMIT_S COMMAND...: at most LIMIT_S (less if the budget has less left),
# output to $OUT_DIR/NAME.log, one line in steps.txt. SIGINT first: Snakemake then removes
# the outputs of the job it was running, so no half-written artifact is left.
run_step() {
  local name=$1 limit=$2 room t0 rc
  shift 2
  room=$(( BUDGET_S - ($(date +%s) - START) ))
  (( limit > room )) && limit=$room
  if (( limit < 20 )); then
    say "SKIP $name: ${room}s of the budget left"
    echo "$name skipped (no time left)" >> "$OUT_DIR/steps.txt"
    FAILED=1
    return 1
  fi
  say "START $name (at most ${limit}s): $*"
  t0=$(date +%s)
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  rc=$?
  say "END $name: exit $rc after $(( $(date +%s) - t0 ))s (log: $OUT_DIR/$name.log)"
  echo "$name exit=$rc seconds=$(( $(date +%s) - t0 ))" >> "$OUT_DIR/steps.txt"
  (( rc == 0 )) || FAILED=1
  return $rc
}

# 1. Is this a CUDA machine whose torch sees the GPU? If not: why, and nothing is run.
if [ "$REHEARSE" != 1 ] && ! command -v nvidia-smi > /dev/null 2>&1 \
    && [ ! -e /proc/driver/nvidia/version ]; then
  say "no NVIDIA driver here (no nvidia-smi on the PATH, no /proc/driver/nvidia): this script measures a CUDA machine, so nothing was run"
  exit 2
fi
nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1
if ! REHEARSE=$REHEARSE PROFILE=$PROFILE "$PY" - > "$OUT_DIR/preflight.txt" 2>&1 <<'PY'
import importlib, os, platform, shutil, sys
from importlib import metadata

print("python", platform.python_version(), sys.executable)
missing = []
for name, dist in (("torch", "torch"), ("numpy", "numpy"), ("pandas", "pandas"),
                   ("yaml", "pyyaml"), ("jsonschema", "jsonschema"), ("pytest", "pytest"),
                   ("snakemake", "snakemake"), ("triton", "triton")):
    try:
        importlib.import_module(name)
        print(name, metadata.version(dist))
    except Exception as exc:  # noqa: BLE001 - a missing or broken package is the news
        print(name, "MISSING:", exc)
        missing.append(name)
if set(missing) & {"torch", "numpy", "pandas", "yaml", "jsonschema", "pytest"}:
    sys.exit(f"cannot run: {missing} not importable (make setup; docs/gpu-run.md)")
from inferlab.config import load_config, resolve
from inferlab.environment import default_device
try:
    device = default_device()  # the reason and the fix if torch cannot see the GPU
    key = resolve(load_config([os.environ["PROFILE"]])).key
except ValueError as exc:
    sys.exit(str(exc))
if device != "cuda" and os.environ["REHEARSE"] != "1":
    sys.exit(f"torch {metadata.version('torch')} sees no CUDA device here (device {device})")
import torch
if device == "cuda":
    print("device", torch.cuda.get_device_name(0), "capability",
          torch.cuda.get_device_capability(0), "torch", torch.__version__, "cuda",
          torch.version.cuda)
print("key", key)
print("C compiler (Triton builds a helper with it)", shutil.which("cc") or shutil.which("gcc"))
from inferlab.kernels import triton_status
print("kernels", triton_status())
PY
then
  say "not a usable CUDA machine, nothing was run:"
  tail -n 1 "$OUT_DIR/preflight.txt" | tee -a "$OUT_DIR/gpu-check.log" >&2
  exit 2
fi
KEY=$(sed -n 's/^key //p' "$OUT_DIR/preflight.txt")
say "results key $KEY; $PROFILE; python $PY; budget ${BUDGET_S}s; see $OUT_DIR/preflight.txt"

# 2. The quick CUDA tests (and the CPU tests of the same files): a broken setup shows here.
run_step tests-cuda 150 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_backends.py \
  tests/test_environment.py tests/test_clocks.py tests/test_memory.py tests/test_measure.py \
  tests/test_attention.py

# 3. The book grid on the GPU, one stage at a time, the claims-deciding timings first, so a
# slot that ends early still leaves them. profiles/book.yaml forces the GPU and leaves the
# grid as config.yaml has it: results go to results/$KEY/, the machine's book evidence.
STAGES="probe:90 prefill:240 decode:150 traffic:60 correctness:120 model:30 claims:60"
if "$PY" -c "import snakemake" 2> /dev/null; then
  for item in $STAGES report:60; do
    run_step "stage-${item%%:*}" "${item##*:}" "$PY" -m snakemake "${item%%:*}" \
      --cores all --configfile "$PROFILE"
  done
else
  say "snakemake is not installed: stages run with python -m inferlab stage (no report)"
  for item in $STAGES; do
    run_step "stage-${item%%:*}" "${item##*:}" "$PY" -m inferlab stage "${item%%:*}" \
      --configfile "$PROFILE"
  done
fi

# 4. Our Triton kernels compiled on this GPU against float64 (about 94 compilations).
TRITON_INTERPRET=$REHEARSE run_step tests-kernels 200 "$PY" -m pytest -q -rs -p no:cacheprovider \
  tests/test_kernels.py

# 5. What to send back: the machine's results, register and logs, and this run's logs.
PACK="$OUT_DIR/gpu-run-$KEY.tar.gz"
tar czf "$PACK" --ignore-failed-read --exclude="$PACK" "results/$KEY" "evidence/$KEY" \
  "logs/$KEY" "$OUT_DIR" 2> /dev/null
say "packed $PACK ($(du -h "$PACK" | cut -f1)); steps:"
tee -a "$OUT_DIR/gpu-check.log" < "$OUT_DIR/steps.txt" >&2
exit $FAILED
