# Two entry points (see README): `make evidence` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.inferlab-installed
CORES  ?= 1
# A machine without an NVIDIA driver gets the CPU build of torch that lies on this disk;
# a GPU user keeps the torch already in the venv, or sets TORCH_SPEC (e.g. TORCH_SPEC=torch).
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)

.PHONY: setup evidence regenerate smoke test lint clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -c 'import torch' 2>/dev/null || $(VPY) -m pip install -q '$(TORCH_SPEC)'
	$(VPY) -m pip install -q -e '.[test,kernels]'
	touch $(STAMP)

# The main job: every stage for this machine, then claims and report/index.html.
evidence: $(STAMP)
	$(VPY) -m inferlab adopt
	$(VENV)/bin/snakemake --cores $(CORES)

# Rerun every stage for this machine even if its results are current.
regenerate: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) --forceall

smoke: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) --configfile profiles/smoke.yaml

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VPY) -m pytest -q

clean-venv:
	rm -rf $(VENV)
