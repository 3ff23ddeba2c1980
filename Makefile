# Two entry points (see README): `make lab` and `make test`. Both create .venv when it is missing
# or out of date with requirements-lock.txt / pyproject.toml.
PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
PY     := $(VENV)/bin/python
export PJRT_DEVICE ?= CPU
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1  # the browser tests use Debian's chromium
# extension/: the browser side of the cell panel (see the env rules below)
EXT      := extension
STATIC   := xla_lab/view/static
LABEXT   := xla_lab/labextension
EXT_OUT  := $(STATIC)/panel.js $(STATIC)/panel.css $(STATIC)/viz-standalone.mjs $(LABEXT)/package.json
EXT_SRC  := $(shell find $(EXT)/src -type f 2>/dev/null) $(EXT)/build.mjs $(EXT)/package.json
EXT_DEPS := $(EXT)/node_modules/.package-lock.json

.PHONY: env lab test bench notebooks clean-env

env: $(STAMP) $(EXT_OUT)

# extension/ is built first (order-only), so the editable install's build hook finds it fresh and skips npm;
# `labextension develop` then links the venv's JupyterLab to xla_lab/labextension, so rebuilds show up.
$(STAMP): requirements-lock.txt pyproject.toml | $(EXT_OUT)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# A reinstall (the lock or pyproject changed) would write the wheel's shared data, install.json
	@# included, through the link `labextension develop` made into xla_lab/labextension, and the next
	@# wheel build would then fail on two install.json: drop the link (made again below) and any such file.
	rm -rf $(VENV)/share/jupyter/labextensions/xla-lab $(LABEXT)/install.json
	$(PY) -m pip install --quiet -c requirements-lock.txt -e '.[lab,test]'
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/jupyter labextension develop --overwrite . >/dev/null
	$(PY) -c "import torch_xla, xla_lab; print('environment ready:', torch_xla.__version__)"
	touch $(STAMP)

# The browser side (extension/, TypeScript): `npm ci`, then esbuild into xla_lab/view/static/ (the cell panel)
# and @jupyter/builder into xla_lab/labextension/ (the JupyterLab extension), both git-ignored, rebuilt when
# missing or older than their sources. Needs Node 20+ and npm.

$(EXT_DEPS): $(EXT)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node 20+) is needed to build $(EXT)/"; exit 1; }
	cd $(EXT) && npm ci --no-audit --no-fund
	touch $(EXT_DEPS)

$(EXT_OUT) &: $(EXT_SRC) $(EXT_DEPS)
	cd $(EXT) && npm run build

# The browser tests (tests/browser, marker `browser`) drive Debian's chromium.
CHROMIUM := /usr/bin/chromium
SUDO     := $(if $(filter 0,$(shell id -u)),,sudo)
$(CHROMIUM):
	$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium

# JupyterLab refuses to start as root unless told; this machine's users often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: env
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG) $(LAB_ARGS)

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

test: env $(CHROMIUM)
	cd $(EXT) && npm test --silent
	$(PY) -m pytest tests notebooks $(NBVAL) $(PYTEST_ARGS)

# Re-run the tutorial notebooks in place so their saved outputs match the code (then commit them).
notebooks: env
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --allow-errors \
		--ExecutePreprocessor.store_widget_state=False notebooks/*.ipynb

bench: env
	$(PY) benchmarks/bench_capture_overhead.py
	$(PY) benchmarks/bench_hlo_analysis.py
	$(PY) benchmarks/bench_saved_size.py
	$(PY) benchmarks/bench_precompile.py
	$(PY) benchmarks/bench_zoo.py
	$(PY) benchmarks/bench_profile.py
	$(PY) benchmarks/bench_multiprocess.py
	$(PY) benchmarks/bench_soak.py $(SOAK_ARGS)

clean-env:
	rm -rf $(VENV)
