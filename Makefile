# Two entry points (see README): `make lab` and `make test`. Both create .venv when it is missing
# or out of date with requirements-lock.txt / pyproject.toml.
PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
PY     := $(VENV)/bin/python
export PJRT_DEVICE ?= CPU

.PHONY: env lab test bench notebooks clean-env

env: $(STAMP)

$(STAMP): requirements-lock.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements-lock.txt -e '.[lab,test]'
	$(PY) -c "import torch_xla, xla_lab; print('environment ready:', torch_xla.__version__)"
	touch $(STAMP)

# JupyterLab refuses to start as root unless told; this machine's users often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: env
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG) $(LAB_ARGS)

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

test: env
	$(PY) -m pytest tests notebooks $(NBVAL) $(PYTEST_ARGS)

# Re-run the tutorial notebooks in place so their saved outputs match the code (then commit them).
notebooks: env
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --allow-errors notebooks/*.ipynb

bench: env
	$(PY) benchmarks/bench_capture_overhead.py
	$(PY) benchmarks/bench_hlo_analysis.py

clean-env:
	rm -rf $(VENV)
