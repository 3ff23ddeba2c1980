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
EXT_SRC  := $(shell find $(EXT)/src -type f -not -path "*/generated/*" 2>/dev/null) $(EXT)/build.mjs $(EXT)/gen-types.mjs \
            $(EXT)/package.json xla_lab/view/panel-1.schema.json
EXT_DEPS := $(EXT)/node_modules/.package-lock.json

.PHONY: env env-2.8 lab test test-2.8 test-alone bench notebooks clean-env

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

# A second environment on the older supported release, made as a user's is: the framework first
# (requirements-lock-2.8.txt: torch 2.8.0, torch_xla 2.8.1, torchvision 0.23.0), then a wheel of
# xla_lab installed as a user installs it (no constraint on the framework: the wheel's ranges must
# accept it), then a check that the framework is exactly as it was, and that the installed wheel
# (imported from outside this checkout) runs %load_ext xla_lab and a %%xla train cell in a kernel.
VENV28  := .venv-2.8
PY28    := $(VENV28)/bin/python
FRAMEWORK28 := $(VENV28)/.framework
STAMP28 := $(VENV28)/.installed
FRAMEWORK_RE := '^(torch|torch-xla|torch_xla|torchvision)=='
PY_SRC  := $(shell find xla_lab -name '*.py' 2>/dev/null)

env-2.8: $(STAMP28)

$(FRAMEWORK28): requirements-lock-2.8.txt
	test -x $(PY28) || $(PYTHON) -m venv $(VENV28)
	$(PY28) -m pip install --quiet --upgrade pip
	$(PY28) -m pip install --quiet -r requirements-lock-2.8.txt
	$(PY28) -m pip freeze | grep -iE $(FRAMEWORK_RE) > $(VENV28)/framework-before.txt
	touch $(FRAMEWORK28)

# (remade when xla_lab's sources change, so the installed wheel is this checkout's)
$(STAMP28): $(FRAMEWORK28) requirements-lock.txt pyproject.toml $(PY_SRC) $(STAMP) $(EXT_OUT)
	rm -rf $(VENV28)/wheel && $(PY) -m pip wheel --quiet --no-deps --wheel-dir $(VENV28)/wheel .
	@# the other pins keep this environment reproducible; the framework's are left out on purpose
	grep -viE $(FRAMEWORK_RE) requirements-lock.txt > $(VENV28)/constraints.txt
	$(PY28) -m pip install --quiet -c $(VENV28)/constraints.txt "$$(ls $(VENV28)/wheel/xla_lab-*.whl)[test]"
	$(PY28) -m pip install --quiet --force-reinstall --no-deps $(VENV28)/wheel/xla_lab-*.whl
	$(PY28) -m pip freeze | grep -iE $(FRAMEWORK_RE) > $(VENV28)/framework-after.txt
	diff $(VENV28)/framework-before.txt $(VENV28)/framework-after.txt \
		|| { echo "installing xla_lab's wheel changed the framework of $(VENV28)"; exit 1; }
	cd $(VENV28) && ./bin/python $(abspath tests/installed_wheel_check.py)
	touch $(STAMP28)

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

# Each part of the run is timed and has a wall-clock limit in minutes (tests/timed_parts.py prints the time
# of each at the end); every test has a limit of its own too (pytest-timeout: pyproject.toml).
test:
	@$(PYTHON) tests/timed_parts.py \
		"environments=25=$(MAKE) --no-print-directory env env-2.8 $(CHROMIUM)" \
		"vitest=5=cd $(EXT) && npm test --silent" \
		"main suite=40=$(PY) -m pytest tests $(PYTEST_ARGS)" \
		"notebooks=20=$(PY) -m pytest notebooks $(NBVAL) $(PYTEST_ARGS)" \
		"torch_xla 2.8 suite=30=$(PY28) -m pytest tests --ignore=tests/browser $(PYTEST_ARGS)"

# Every test file alone, one pytest process each (tests/unit, then tests/kernel with the zoo; not the
# browser's): a file that passes only after another file, or that runs no test (pytest's exit code 5),
# fails here. `make test` runs everything in one process (where no test at all is pytest's exit 5 too).
# About 10-20 minutes; PYTEST_ARGS go to every pytest.
test-alone: env
	$(PY) tests/run_each_alone.py $(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

# On torch_xla 2.8.1, every test but the browser's (JupyterLab's side does not depend on torch_xla)
# and the tutorials' saved outputs (made on 2.9: XLA 2.8 names some kernels differently).
test-2.8: env-2.8
	$(PY28) -m pytest tests --ignore=tests/browser $(PYTEST_ARGS)

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
	rm -rf $(VENV) $(VENV28)
