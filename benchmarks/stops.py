"""Follow one prefill job from ``runner.run_job`` and count its stops (issue 50): a stop is a
call into a function of another inferlab module than its caller, counted once per (caller
module, callee function). Not counted: imports, calls into ``core/`` (paths, hashing, atomic
writes), and whatever the stage's own code does once entered (``Params.from_config``,
``run``): the stage is one stop each time the runner enters it.

    .venv/bin/python -m inferlab stage probe --machine trace-box --configfile profiles/smoke.yaml
    .venv/bin/python benchmarks/stops.py          # in a scratch clone: it writes results/
"""

import sys
from pathlib import Path

from inferlab.workflow import runner

STAGE = "inferlab.stages.prefill"
root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
stops, stack, in_stage = [], [], [0]


def profile(frame, event, arg):
    module = frame.f_globals.get("__name__", "")
    if not module.startswith("inferlab"):
        return
    if event == "call":
        caller = stack[-1] if stack else None
        name = frame.f_code.co_name
        if (not in_stage[0] and caller not in (None, module) and name != "<module>"
                and not module.startswith("inferlab.core")):
            stops.append((caller, f"{module}.{name}"))
        in_stage[0] += module == STAGE
        stack.append(module)
    elif event == "return" and stack:
        stack.pop()
        in_stage[0] -= module == STAGE


job = runner.run_job


def traced(*args, **kwargs):
    stack.append("inferlab.workflow.runner")
    sys.setprofile(profile)
    try:
        return job(*args, **kwargs)
    finally:
        sys.setprofile(None)


runner.run_job = traced
runner.cli_stage("prefill", root, "trace-box", configfiles=[root / "profiles/smoke.yaml"])
seen = list(dict.fromkeys(stops))
modules = {callee.rsplit(".", 1)[0] for _, callee in seen}
print(f"{len(seen)} stops in {len(modules)} modules, "
      f"{sum(c.startswith('inferlab.evidence') for _, c in seen)} of them in evidence/")
for caller, callee in seen:
    print(f"  {caller.removeprefix('inferlab.'):24s} -> {callee.removeprefix('inferlab.')}")
