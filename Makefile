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
# the venv's torch cannot use (python -m inferlab.environment says why and how to fix it).
TORCH_VERSION := 2.13.0
TORCH_SPEC ?= torch==$(TORCH_VERSION)
TORCH_INDEX ?=

.PHONY: setup evidence regenerate smoke test lint clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -c 'import torch' 2>/dev/null || \
	  $(VPY) -m pip install -q $(if $(TORCH_INDEX),--index-url '$(TORCH_INDEX)') '$(TORCH_SPEC)'
	$(VPY) -m pip install -q -e '.[test,kernels]'
	$(VPY) -m inferlab.environment
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
