#!/usr/bin/env bash
# The first GPU run in one command (docs/gpu-run.md), made for the lent H200 as it is:
# its own python3 (3.12), torch 2.11 and Triton 3.6, no registry, no snakemake. What the
# project needs beyond the image (jsonschema and its needs) comes as wheels in gpu-wheels/
# (scripts/gpu-wheels.sh), installed with pip --no-index --target into a fresh folder.
#
#   OUT=<empty folder> bash scripts/gpu-check.sh            # on the GPU (the device tool sets OUT)
#   OUT=$(mktemp -d) bash scripts/gpu-check.sh --dry-run    # here, on a CPU
#
# Its steps, their order and their limits are the plan (python -m inferlab.workflow.gpu_plan
# steps): the pipeline's stages as declared, each `python -m inferlab stage NAME --limit-s
# L` (it stops timing at L and writes what it measured) under `timeout -s TERM -k K T` (the
# backstop), then ncu's DRAM bytes and the kernel tests in what the budget leaves. The plan
# is checked first: one that does not fit the lent machine's limits runs nothing.
# $OUT must be absolute, empty and writable (checked before anything runs); it receives
#   evidence.tar.gz  results/<key>/, evidence/<key>/, logs/<key>/ and logs/gpu-check/, re-packed
#                    after EVERY step (written beside, then renamed), so a call killed at
#                    any moment returns every point of every step that ended
#   summary.log      one line per step and the $OUT check
# SIGTERM (or INT) stops the step running at a point boundary (it writes what it measured),
# packs, and ends. --dry-run: the same plan on this CPU, in a temporary copy of the
# repository (nothing is left in the checkout), its stages timed by the simulated GPU
# clock (inferlab.measurement.simclock: the chapter's times on a virtual clock, which the
# budgets and limits here read too), the carried wheels used by the stages, the planned
# Triton configurations checked under the interpreter, no test steps.
# GPU_CHECK_STAGES="claims ncu" runs only the steps named (stage names, ncu, tests-*,
# exactness; "none": no step, the install, plan and packs only; any other name is refused),
# GPU_CHECK_TESTS=0 no tests, GPU_CHECK_BUDGET_S a lower budget, GPU_CHECK_SITE the wheels'
# folder (must not exist or be empty), PYTHON another interpreter.
# Exit status: 0 every step passed; 1 a step failed, was stopped or skipped, or $OUT breaks
# a limit; 2 nothing was measured (no GPU torch can use, the carried wheels do not install,
# the plan does not fit, or $OUT is unusable).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: OUT=<empty folder> $0 [--dry-run]" >&2; exit 2 ;;
esac
if [ -n "${GPU_CHECK_PARENT:-}" ]; then  # a test it runs must not start it again
  echo "gpu-check: already running (process $GPU_CHECK_PARENT); not nesting" >&2
  exit 2
fi
export GPU_CHECK_PARENT=$$ PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
refuse() { echo "gpu-check: $*; nothing was run" >&2; exit 2; }

# $OUT: what comes back. Stale files would come back beside the run's, a read-only folder
# would fail only after the device time was spent, a relative one would land wherever.
OUT_DIR=${OUT:-}
[ -n "$OUT_DIR" ] || refuse "OUT is not set: the device tool sets it; by hand, OUT=\$(mktemp -d) bash $0"
case "$OUT_DIR" in /*) ;; *) refuse "OUT=$OUT_DIR is relative: give an absolute path (OUT=\$(mktemp -d))" ;; esac
mkdir -p "$OUT_DIR" 2> /dev/null || refuse "OUT=$OUT_DIR cannot be created"
[ -z "$(ls -A "$OUT_DIR" 2> /dev/null)" ] || refuse "OUT=$OUT_DIR is not empty ($(ls -A "$OUT_DIR" \
  | head -n 3 | tr '\n' ' ')...): its files would come back beside this run's; give an empty folder"
{ : > "$OUT_DIR/summary.log"; } 2> /dev/null || refuse "OUT=$OUT_DIR is not writable"
SUMMARY="$OUT_DIR/summary.log"

if (( DRY )); then
  PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3)}
  PROFILE=                     # the work copy's config.yaml is the simulated one
else
  PY=${PYTHON:-python3}        # the image's: /opt/torch/.venv/bin/python3 on the H200
  PROFILE=profiles/book.yaml
fi
command -v "$PY" > /dev/null || refuse "no Python $PY here"
case "$PY" in */*) PY=$(realpath -ms "$PY") ;; *) PY=$(command -v "$PY") ;; esac  # a venv's link kept
WHEELS=$(cd "$REPO" && realpath -ms "${GPU_CHECK_WHEELS:-gpu-wheels}")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/inferlab-gpu-check.XXXXXX") || refuse "no temporary folder"
# the site, the dry run's copy and its clock: this run's alone (GPU_CHECK_KEEP=1 keeps them)
[ "${GPU_CHECK_KEEP:-0}" = 1 ] || trap 'rm -rf "$TMP"' EXIT
SITE=$(realpath -ms "${GPU_CHECK_SITE:-$TMP/site}")
[ -z "$(ls -A "$SITE" 2> /dev/null)" ] || refuse "GPU_CHECK_SITE=$SITE is not empty: give a new folder"
if (( DRY )); then           # a copy of the working tree as it travels, without results
  mkdir -p "$TMP/repo"
  if git -C "$REPO" rev-parse --git-dir > /dev/null 2>&1; then
    git -C "$REPO" ls-files -z --cached --others --exclude-standard | (cd "$REPO" && \
      tar --null --ignore-failed-read -T - -cf - 2> /dev/null) | tar -C "$TMP/repo" -xf -
  else
    tar -C "$REPO" --exclude=./results --exclude=./evidence --exclude=./logs \
      --exclude=./report --exclude=./.venv --exclude=./gpu-wheels --exclude=./.snakemake \
      --exclude=__pycache__ -cf - . | tar -C "$TMP/repo" -xf -
  fi
  rm -rf "$TMP/repo/results" "$TMP/repo/evidence" "$TMP/repo/logs" "$TMP/repo/report"
  cd "$TMP/repo" || refuse "no copy of the repository in $TMP"
else
  cd "$REPO" || exit 2
fi
WORK=logs/gpu-check          # step logs; packed into the tarball, never into $OUT itself
mkdir -p "$WORK" && rm -f "$WORK"/*.log "$WORK"/*.txt "$WORK"/*.csv
: > "$WORK/steps.txt"
unset TRITON_INTERPRET       # the stages time compiled kernels; the interpreter is for tests
SIM_STATE=
START=$(date +%s)
FAILED=0 STOPPING=0 CHILD= KEY=unknown BUDGET_S=0 KILL_AFTER_S=10

now_s() {  # the script's clock: real, plus in a dry run the simulated GPU's seconds
  local spent=0
  if [ -n "$SIM_STATE" ] && [ -s "$SIM_STATE" ]; then read -r spent < "$SIM_STATE"; fi
  echo $(( $(date +%s) + ${spent%.*} ))
}
say() { echo "[gpu-check +$(( $(now_s) - START ))s] $*" | tee -a "$SUMMARY" >&2; }
pack() {  # the evidence so far, replaced atomically (a kill mid-tar leaves the last one)
  local tmp="$OUT_DIR/.evidence.tar.gz.part"
  tar czf "$tmp" --ignore-failed-read "results/$KEY" "evidence/$KEY" "logs/$KEY" "$WORK" \
    2> /dev/null
  mv -f "$tmp" "$OUT_DIR/evidence.tar.gz"
}
stop() { STOPPING=1 FAILED=1; [ -n "$CHILD" ] && kill -TERM "$CHILD" 2> /dev/null; }
wanted() { [ -z "${GPU_CHECK_STAGES:-}" ] || case " $GPU_CHECK_STAGES " in *" $1 "*) ;; *) return 1 ;; esac; }
trap stop TERM INT

# run_step NAME TIMEOUT LIMIT COMMAND...: at most TIMEOUT seconds (less if the budget has
# less left: then LIMIT, the stage's --limit-s, shrinks as much), SIGTERM then SIGKILL
# KILL_AFTER_S later; output to $WORK/NAME.log, a line in steps.txt and summary.log, then
# the tarball re-packed. A LIMIT of - is a step without one. @LIMIT in COMMAND is replaced.
run_step() {
  local name=$1 timeout=$2 limit=$3 room t0 r0 rc arg
  shift 3
  room=$(( BUDGET_S - ($(now_s) - START) ))
  if (( timeout > room )); then
    [ "$limit" != - ] && limit=$(( limit - (timeout - room) ))
    timeout=$room
  fi
  if (( STOPPING )) || (( timeout < 10 )) || { [ "$limit" != - ] && (( limit < 1 )); }; then
    say "SKIP $name: $( (( STOPPING )) && echo "stopped by a signal" || echo "${room}s of the ${BUDGET_S}s budget left")"
    echo "$name skipped" >> "$WORK/steps.txt"
    FAILED=1
    return 1
  fi
  local cmd=()
  for arg in "$@"; do cmd+=("${arg//@LIMIT/$limit}"); done
  t0=$(now_s) r0=$(date +%s)
  timeout -s TERM -k "$KILL_AFTER_S" "$timeout" "${cmd[@]}" > "$WORK/$name.log" 2>&1 &
  CHILD=$!
  wait "$CHILD"; rc=$?
  while kill -0 "$CHILD" 2> /dev/null; do wait "$CHILD"; rc=$?; done  # a trap ended the wait
  CHILD=
  echo "$name exit=$rc seconds=$(( $(now_s) - t0 )) limit=$limit timeout=$timeout$(
    [ -n "$SIM_STATE" ] && echo " real_seconds=$(( $(date +%s) - r0 ))")" >> "$WORK/steps.txt"
  say "$name: exit $rc after $(( $(now_s) - t0 ))s (limit ${limit}, backstop ${timeout}s)$(
    (( rc == 124 || rc == 137 )) && echo ': TIMED OUT')$( (( rc != 0 )) && echo "; tail: $(tail -n 1 \
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
# x86-64) into an empty folder, no index, the network refused; imported by a CPython 3.12
# (here: GPU_CHECK_PY312, default python3.12). A dry run installs them once more for its
# own Python (gpu-wheels/host/ holds its rpds-py), and its stages use that folder.
if ! compgen -G "$WHEELS/*.whl" > /dev/null; then
  say "no wheels in $WHEELS/: make them with bash scripts/gpu-wheels.sh and carry the folder"
  exit 2
fi
install_wheels() {  # install_wheels FOLDER PIP_TAG_OPTIONS... -- WHEEL...
  local target=$1; shift
  env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_NO_INDEX=1 \
    PIP_CONFIG_FILE=/dev/null http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
    --no-cache-dir --only-binary=:all: --target "$target" "$@" >> "$WORK/install.log" 2>&1
}
if ! install_wheels "$SITE" --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$WHEELS"/*.whl; then
  say "the carried wheels did not install (nothing was run): $(tail -n 1 "$WORK/install.log")"
  exit 2
fi
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
STAGE_SITE=$SITE
if [ "$CHECK_PY" != "$PY" ]; then  # the cp312 rpds-py cannot load here: this Python's own
  STAGE_SITE=$TMP/site-host
  host=$(ls "$WHEELS"/host/*.whl 2> /dev/null)
  if [ -z "$host" ] || ! install_wheels "$STAGE_SITE" $(ls "$WHEELS"/*.whl | grep -v '/rpds_py-') $host; then
    say "no wheels for $("$PY" --version 2>&1) in $WHEELS/host/ (bash scripts/gpu-wheels.sh makes them): the stages use its own jsonschema"
    STAGE_SITE=
  fi
fi
export PYTHONPATH=$PWD${STAGE_SITE:+:$STAGE_SITE}

# 2. The plan, from the stage declaration and the cuda blocks: it must fit before anything
# is timed. A dry run replays it on the simulated clock, in this copy, keyed apart.
if ! "$PY" -m inferlab.workflow.gpu_plan check --configfile profiles/book.yaml \
    --steps-out "$WORK/plan-steps.txt" > "$WORK/plan.txt" 2>&1; then
  say "the plan does not fit the lent machine's limits, nothing was run: $(tail -n 1 "$WORK/plan.txt")"
  pack
  exit 2
fi
# A name in GPU_CHECK_STAGES that is no step of the plan would be skipped without a word
# (a typo, "prefil"), the device time spent on the rest: refused before anything runs.
KNOWN="none exactness $(awk '$1 == "step" { print $2; if ($3 != "-") print $3 }' "$WORK/plan-steps.txt" | tr '\n' ' ')"
for want in ${GPU_CHECK_STAGES:-}; do
  case " $KNOWN " in
    *" $want "*) ;;
    *) say "GPU_CHECK_STAGES names '$want', which is no step of the plan (the steps: $KNOWN): nothing was run"
       pack
       exit 2 ;;
  esac
done
read -r _ BUDGET_S < <(grep '^budget_s ' "$WORK/plan-steps.txt")
read -r _ KILL_AFTER_S < <(grep '^kill_after_s ' "$WORK/plan-steps.txt")
# GPU_CHECK_BUDGET_S may lower the plan's budget, never raise it: the plan fits the lent
# machine at its own (5000 ran past the command's limit; "abc" ended the script silently)
if [ -n "${GPU_CHECK_BUDGET_S:-}" ]; then
  if ! [[ $GPU_CHECK_BUDGET_S =~ ^[0-9]+$ ]] || (( 10#$GPU_CHECK_BUDGET_S > BUDGET_S )); then
    say "GPU_CHECK_BUDGET_S=$GPU_CHECK_BUDGET_S: it must be whole seconds, at most the plan's budget of ${BUDGET_S}s (which fits the lent machine's limits): nothing was run"
    pack
    exit 2
  fi
  BUDGET_S=$(( 10#$GPU_CHECK_BUDGET_S ))
fi
STAGE_ARGS=(${PROFILE:+--configfile "$PROFILE"})
if (( DRY )); then
  "$PY" -m inferlab.workflow.gpu_dry_run config config.yaml.sim --configfile profiles/book.yaml \
    2>> "$WORK/plan.txt" && mv config.yaml.sim config.yaml || refuse "no simulated config: $(tail -n 1 "$WORK/plan.txt")"
  mkdir -p "$TMP/sim-site"
  echo "from inferlab.measurement.simclock import install_from_environment; install_from_environment()" \
    > "$TMP/sim-site/sitecustomize.py"
  SIM_STATE=$TMP/simulated-gpu-seconds
fi

# 3. Preflight: versions, the runtime, the GPU, the results key.
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
from inferlab.measurement.environment import default_device, runtime
from inferlab.measurement.sandbox import ncu_blocked
found = runtime()
print("runtime", found["runtime"], "|", "; ".join(found["evidence"]) or "no sandbox seen")
print("ncu", shutil.which("ncu"), "|", ncu_blocked(found) or "may read the counters here")
try:
    device = default_device()  # the reason and the fix if torch cannot see the GPU
    key = resolve(load_config([os.environ["PROFILE"]] if os.environ["PROFILE"] else [])).key
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
say "key $KEY; $("$PY" --version 2>&1); $(grep -E '^(torch|triton|jsonschema|runtime) ' \
  "$WORK/preflight.txt" | cut -c1-80 | tr '\n' ' ')budget ${BUDGET_S}s"
pack

# 4. The planned Triton configurations, exact at the stages' lengths? On a CPU only the
# interpreter can say (the GPU call's stages check them compiled before timing them).
if (( DRY )) && wanted exactness; then
  run_step exactness 60 - env TRITON_INTERPRET=1 "$PY" -m inferlab.workflow.gpu_dry_run \
    exactness --out "$WORK/exactness.csv"
fi

# 5. The plan's steps in its order. A dry run's stages load the simulated clock.
NCU_T=$( (( DRY )) && echo 64 || echo 4096 )
mapfile -t STEPS < <(grep '^step ' "$WORK/plan-steps.txt")
for line in "${STEPS[@]}"; do
  read -r _ name stage limit timeout _ <<< "$line"
  case "$name" in
    stage-*)
      wanted "$stage" || continue
      if [ -n "$SIM_STATE" ]; then
        run_step "$name" "$timeout" "$limit" env PYTHONPATH="$PYTHONPATH:$TMP/sim-site" \
          INFERLAB_SIMULATED_GPU="$SIM_STATE" "$PY" -m inferlab stage "$stage" \
          "${STAGE_ARGS[@]}" $([ "$limit" != - ] && echo "--limit-s @LIMIT")
      else
        run_step "$name" "$timeout" "$limit" "$PY" -m inferlab stage "$stage" \
          "${STAGE_ARGS[@]}" $([ "$limit" != - ] && echo "--limit-s @LIMIT")
      fi ;;
    ncu)   # DRAM bytes per kernel; where ncu cannot read the counters the rows say why
      wanted ncu && run_step ncu "$timeout" - "$PY" -m inferlab.measurement.ncu run \
        --tokens "$NCU_T" --out "$WORK/ncu-bytes.csv" ;;
    tests-kernels)
      (( DRY )) || [ "${GPU_CHECK_TESTS:-1}" = 0 ] || ! wanted "$name" || run_step "$name" \
        "$timeout" - env TRITON_INTERPRET=0 "$PY" -m pytest -q -rs -p no:cacheprovider \
        tests/test_kernels.py ;;
    tests-cuda)
      (( DRY )) || [ "${GPU_CHECK_TESTS:-1}" = 0 ] || ! wanted "$name" || run_step "$name" \
        "$timeout" - "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_clocks.py \
        tests/test_cuda_clock.py tests/test_backends.py tests/test_measure.py \
        tests/test_attention.py ;;
    *) say "the plan names a step $name this script does not know"; FAILED=1 ;;
  esac
done
(( DRY )) && say "tests-kernels, tests-cuda: not run in a dry run (the CPU suite runs them here)"
(( STOPPING )) && say "stopped by a signal: what finished is packed"

# 6. What comes back must fit: checked, and the result in summary.log (inside $OUT).
say "steps: $(tr '\n' ';' < "$WORK/steps.txt")"
pack
if ! "$PY" "$REPO/scripts/check-out.py" "$OUT_DIR" >> "$SUMMARY" 2>&1; then
  FAILED=1
fi
tail -n 1 "$SUMMARY" >&2
say "done, exit $FAILED"
exit $FAILED
