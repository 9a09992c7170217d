#!/usr/bin/env bash
# The lent GPU's call (docs/gpu-run.md): our kernels' tuning, each stage that runs on the
# device in the pipeline's order (`inferlab stage NAME --limit-s L`), then ncu's DRAM bytes
# in the time left, each step's seconds from config.yaml's gpu_call. results/KEY,
# evidence/KEY and the logs are packed into $OUT/results.tar.gz after every step, so a call
# cut short returns what it measured; $OUT/call.log says what each step did.
#   OUT=<empty folder> bash scripts/gpu-call.sh                            # on the GPU
#   PROFILE=profiles/smoke.yaml OUT=$(mktemp -d) bash scripts/gpu-call.sh  # its rehearsal
# A rerun: STEPS="decode ncu" TIMEOUT_S=<its timeout_s>. Exit status: 0 every step passed,
# 1 a step failed or was cut (what finished is packed), 2 nothing was run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PROFILE=${PROFILE:-profiles/book.yaml}
LOGS=logs/gpu-call
# once $OUT is checked, call.log (which comes back) says why too
refuse() { echo "gpu-call: $*; nothing was run" | tee -a ${OUT_OK:+"$OUT/call.log"} >&2; exit 2; }
case "${OUT:-}" in /*) ;; *) refuse "OUT='${OUT:-}' is not an absolute path (the device tool \
sets it; by hand: OUT=\$(mktemp -d))" ;; esac
mkdir -p "$OUT" 2> /dev/null && [ -z "$(ls -A "$OUT")" ] || refuse "OUT=$OUT is not an empty \
folder: what is there would come back beside this call's files"
touch "$OUT/call.log" 2> /dev/null || refuse "OUT=$OUT is not writable"
OUT_OK=1
say() { echo "[gpu-call +${SECONDS}s] $*" | tee -a "$OUT/call.log" >&2; }

# The image lacks jsonschema (and its needs): the carried wheels, without an index.
if ! "$PY" -c 'import jsonschema' 2> /dev/null; then
  SITE=$(mktemp -d) && "$PY" -m pip install -q --no-index --no-deps --no-compile \
    --target "$SITE" gpu-wheels/*.whl > /dev/null 2>&1 || refuse "jsonschema is missing \
and gpu-wheels/*.whl did not install (make gpu-wheels here, carry gpu-wheels)"
  export PYTHONPATH=$SITE
fi
# The plan: the key, and each step with its seconds. A GPU torch cannot use stops here.
mkdir -p "$LOGS"
PLAN=$("$PY" - "$PROFILE" 2> "$LOGS/plan.err" << 'PY'
import sys
from inferlab.core.pipeline import STAGES
from inferlab.workflow.config import device_block, load_config, resolve
try:
    raw = load_config([sys.argv[1]])
    config, call = resolve(raw), raw["gpu_call"]
except ValueError as exc:  # e.g. a profile's device cuda where torch sees no GPU
    sys.exit(str(exc))
print("key", config.key, config.device, call["command_s"], call["grace_s"])
print("step tune", call["tune_s"])
for name in (name for name, declared in STAGES.items() if declared.needs_device):
    if name not in call["stages"]:
        sys.exit(f"config.yaml's gpu_call.stages gives the stage {name} no seconds")
    print("step", name, call["stages"][name])
prefill, decode = (device_block(raw[name], "cuda") for name in ("prefill", "decode"))
print("step ncu -", "--tokens", *{t for size in prefill["sizes"] for t in size["T"]},
      "--cache-lens", *decode["cache_lens"])
PY
) || refuse "$(tail -n 1 "$LOGS/plan.err")"
read -r _ KEY DEVICE COMMAND_S GRACE_S < <(grep '^key ' <<< "$PLAN")
COMMAND_S=${TIMEOUT_S:-$COMMAND_S}  # a rerun's shorter timeout_s: ncu ends within it
for want in ${STEPS:-}; do
  grep -q "^step $want " <<< "$PLAN" || refuse "STEPS names '$want', which is no step \
(the steps: $(awk '$1 == "step" { printf "%s ", $2 }' <<< "$PLAN"))"
done
echo "$PLAN" > "$LOGS/plan.txt"
nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1
FAILED=0
pack() {  # written beside, then renamed: a call killed mid-pack returns the last whole one
  tar czf "$OUT/.results.tar.gz" --ignore-failed-read "results/$KEY" "evidence/$KEY" \
    "logs/$KEY" "$LOGS" 2> /dev/null; mv -f "$OUT/.results.tar.gz" "$OUT/results.tar.gz"
}
step() {  # step NAME SECONDS COMMAND...: SIGTERM GRACE_S after SECONDS, SIGKILL 10 s later
  local name=$1 limit=$2 began=$SECONDS rc; shift 2
  timeout -k 10 $(( limit + GRACE_S )) "$@" > "$LOGS/$name.log" 2>&1; rc=$?
  say "$name: exit $rc after $(( SECONDS - began ))s (limit ${limit}s)$( (( rc )) && echo \
"; $(tail -n 1 "$LOGS/$name.log" | cut -c1-300)")"
  (( rc == 0 )) || FAILED=1
  pack
}
say "key $KEY, device $DEVICE, $("$PY" --version 2>&1), profile $PROFILE"
pack
while read -r _ name limit args; do
  [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" $name "* ]] || continue
  case $name in
    tune) if [ "$DEVICE" != cuda ]; then say "tune: not run on $DEVICE (it times Triton on a GPU)"
          else step tune "$limit" "$PY" -m inferlab tune --configfile "$PROFILE" --limit-s "$limit"
          fi ;;
    ncu) limit=$(( COMMAND_S - SECONDS - 2 * GRACE_S ))
         if (( limit < 20 )); then say "ncu: not run, ${limit}s left"; FAILED=1
         else step ncu "$limit" "$PY" -m inferlab.measurement.ncu run $args --limit-s "$limit" \
           --out "$LOGS/ncu-bytes.csv"; fi ;;
    *) step "$name" "$limit" "$PY" -m inferlab stage "$name" --configfile "$PROFILE" \
         --limit-s "$limit" ;;
  esac
done < <(grep '^step ' <<< "$PLAN")
say "done, exit $FAILED"
exit $FAILED
