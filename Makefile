# Two entry points (see README): `make evidence` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.inferlab-installed
CORES  ?= 1
# torch is pinned on every machine. pip finds the CPU build of 2.13.0 on this disk (its
# find-links); elsewhere PyPI's build, made for CUDA 13 (NVIDIA driver 580 or newer). For an
# older driver set TORCH_INDEX to PyTorch's wheel index of a CUDA 12 build (docs/gpu-run.md).
# A torch already in the venv is kept, but setup then stops if an NVIDIA GPU is here that
# the venv's torch cannot use (python -m inferlab.measurement.environment says why and how to fix it).
TORCH_VERSION := 2.13.0
TORCH_SPEC ?= torch==$(TORCH_VERSION)
TORCH_INDEX ?=

# Snakemake does not quote the interpreter's path in the commands it runs: in a folder whose
# path holds a space every job exits 127 (after removing its outputs). Refused up front.
ifneq ($(words $(CURDIR)),1)
$(error the path '$(CURDIR)' holds a space: Snakemake does not quote it in the commands it runs, so every job would fail with exit status 127 after removing its outputs; move or clone the repository to a path without spaces)
endif

.PHONY: setup evidence regenerate series smoke test test-isa lint clean-venv mutation gpu-wheels

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -c 'import torch' 2>/dev/null || \
	  $(VPY) -m pip install -q $(if $(TORCH_INDEX),--index-url '$(TORCH_INDEX)') '$(TORCH_SPEC)'
	$(VPY) -m pip install -q -e '.[test,kernels]'
	$(VPY) -m inferlab.measurement.environment
	touch $(STAMP)

# The main job: every stage for this machine, then claims and report/index.html.
evidence: $(STAMP)
	$(VPY) -m inferlab adopt --cores $(CORES)
	$(VENV)/bin/snakemake --cores $(CORES)

# Rerun every stage for this machine even if its results are current.
regenerate: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) --forceall

# Add RUNS runs of the timing stages to this machine's series (inferlab.stages.series), one
# after another with the series stage between them, then the rest once: the committed book
# evidence of a machine is a series of at least 3 runs. Each run is about 4 minutes.
RUNS ?= 3
series: $(STAMP)
	$(VPY) -m inferlab adopt
	@for i in $$(seq 1 $(RUNS)); do \
	  echo "series: run $$i of $(RUNS)"; \
	  $(VENV)/bin/snakemake $$( [ $$i -lt $(RUNS) ] && echo series ) --cores $(CORES) \
	    --forcerun prefill decode series || exit 1; \
	done

smoke: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) --configfile profiles/smoke.yaml

# The suite on TEST_JOBS pytest-xdist workers: the tests of the session's one pipeline run
# (tests/pipeline_repo.py) are one xdist group, built and run on one worker while the other
# runs the rest; then the timing-sensitive tests (marker `serial`, tests/conftest.py) alone.
TEST_JOBS ?= 2
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VPY) -m pytest -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder -m "not serial" --durations=12
	$(VPY) -m pytest -q -m serial --durations=8

# The numerics tests again under every ATen CPU capability from `default` up to this host's
# (docs/other-cpu.md): their tolerances must hold whichever SIMD kernels a CPU has (issue 18).
# The capabilities come from the CPU's flags (inferlab.workflow.cpu_guard): torch takes a
# capability above the CPU's on trust and dies of an illegal instruction.
NUMERICS_TESTS := tests/test_attention.py tests/test_partials.py tests/test_kernels.py \
                  tests/test_backends.py
test-isa: $(STAMP)
	@caps=$$(env -u ATEN_CPU_CAPABILITY $(VPY) -m inferlab.workflow.cpu_guard) || exit 1; \
	for cap in $$caps; do \
	  got=$$(ATEN_CPU_CAPABILITY=$$cap $(VPY) -c \
	    'import torch; print(torch.backends.cpu.get_cpu_capability().lower())'); \
	  [ "$$got" = "$$cap" ] || { echo "test-isa: torch runs $$got under $$cap"; exit 1; }; \
	  echo "test-isa: $(NUMERICS_TESTS) under ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap $(VPY) -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) \
	    $(NUMERICS_TESTS) \
	    || exit 1; \
	done

# Mutation testing (docs/testing.md): slow, a periodic check, not part of CI.
# MUTATE names the modules of inferlab/ to mutate (layer.module); [tool.mutmut] in pyproject.toml the tests.
MUTATE ?= judging.claims judging.selection judging.verdicts judging.numtext presentation.formats \
          measurement.measure algorithms.traffic evidence.register core.files \
          evidence.loading evidence.verify
MUTMUT_JOBS ?= 2
mutation: $(STAMP)
	$(VPY) -m pip install -q 'mutmut>=3.8,<4'
	@mkdir -p mutants
	@for m in $(MUTATE); do \
	  echo "mutating inferlab/$$(echo $$m | tr . /).py (log: mutants/run-$$m.log)"; \
	  $(VENV)/bin/mutmut run --max-children $(MUTMUT_JOBS) "inferlab.$$m.*" \
	    > mutants/run-$$m.log 2>&1 || { tail -c 2000 mutants/run-$$m.log; exit 1; }; \
	done
	@$(VENV)/bin/mutmut results --all true | awk -v mods="$(MUTATE)" '\
	  BEGIN { n = split(mods, m, " "); for (i = 1; i <= n; i++) want[m[i]] = 1 } \
	  { name = $$1; sub(/:$$/, "", name); split(name, part, "."); mod = part[2] "." part[3]; \
	    st = $$0; sub(/^[^:]*: /, "", st) } \
	  !(mod in want) { next } \
	  st == "killed" || st == "timeout" || st == "segfault" { caught[mod]++ } \
	  st == "survived" || st == "no tests" || st == "suspicious" { missed[mod]++; \
	    left = left "  " name ": " st "\n" } \
	  END { for (i = 1; i <= n; i++) { c = caught[m[i]] + 0; t = c + missed[m[i]]; \
	      printf "%-10s %4d of %4d mutants caught (%.1f%%)\n", m[i], c, t, t ? 100 * c / t : 0 } \
	    if (left != "") printf "not caught (mutmut show NAME shows one):\n%s", left }'

# The wheels the lent GPU machine lacks, carried with its run (docs/gpu-run.md).
gpu-wheels:
	bash scripts/gpu-wheels.sh

clean-venv:
	rm -rf $(VENV)
