# The course's two entry points: `make lab` and `make test`. Both create .venv when it is missing.
# `sudo make hub` runs a class on JupyterHub on this machine (README: "Run a class on JupyterHub").
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION := 2.13.0
LAB_PORT ?= 8888
# JupyterLab refuses to run as root unless told; containers and CI often are root.
ROOT_FLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: lab test test-fast install lock clean hub lab-extension

install: $(STAMP)

$(STAMP): pyproject.toml requirements/dev.lock requirements/no-deps.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; run: make PYTHON=python3.11 ...")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# torch first and alone: a torch you installed yourself (say a CUDA build) is kept.
	@$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/pip install "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -r requirements/dev.lock
	$(BIN)/pip install --no-deps -r requirements/no-deps.lock
	$(BIN)/pip install --no-deps -e .
	@touch $(STAMP)

# JupyterLab as learners get it (lab-settings/: lesson 00 first, no news pop-up, nbgrader's learner
# extensions only); tests/browser/ starts it the same way.
lab: $(STAMP)
	@echo "Starting JupyterLab on the course; open the URL it prints (lesson 00 opens first)."
	$(BIN)/jupyter lab --config=$(CURDIR)/lab-settings/jupyter_lab_config.py --port=$(LAB_PORT) $(ROOT_FLAG) \
		--ServerApp.root_dir=$(CURDIR)

test: $(STAMP)
	$(BIN)/python -m pytest

# The quick loop while editing (a few minutes): every test but those marked slow (tests/conftest.py).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

# JupyterHub's proxy, from npm (pinned by its package-lock.json), then the class hub (as root).
HUB := deploy/jupyterhub
$(HUB)/node_modules/.installed: $(HUB)/package.json $(HUB)/package-lock.json
	npm ci --prefix $(HUB) --no-audit --no-fund
	@touch $@

hub: $(STAMP) $(HUB)/node_modules/.installed
	$(HUB)/start.sh

# The course's JupyterLab extension (lab-settings/learner-view/README.md), rebuilt by maintainers
# after changing its source; needs node and npm. Its built files (lab-settings/labextensions/) are
# committed: `make lab` and the class hub load them as they are, without node.
LAB_EXTENSION := lab-settings/learner-view
lab-extension: $(STAMP)
	npm ci --prefix $(LAB_EXTENSION) --no-audit --no-fund
	cd $(LAB_EXTENSION) && node node_modules/@jupyterlab/builder/lib/build-labextension.js \
		--core-path "$$($(CURDIR)/$(BIN)/python -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')" .

# Re-pin requirements/dev.lock from what .venv has now (maintainers, after changing pyproject.toml).
lock: $(STAMP)
	@echo "# Pinned development and CI environment (torch is installed first, separately). Regenerate: make lock" > requirements/dev.lock
	@# Triton has wheels for Linux only: its pin keeps the platform marker of pyproject.toml.
	@# ngshare is for the class hub, which does not run on Windows (not on conda-forge: environment.yml gets it with pip).
	@# What requirements/no-deps.lock pins is installed apart, without dependencies.
	$(BIN)/pip freeze --exclude-editable | grep -v -E '^(torch|attnlab|ngshare-exchange|ngshare_exchange)==' \
		| sed -E 's/^(triton==[^;]*)$$/\1; sys_platform != "darwin" and sys_platform != "win32"/' \
		| sed -E 's/^(ngshare==[^;]*)$$/\1; sys_platform != "win32"/' >> requirements/dev.lock

clean:
	rm -rf $(VENV) course test-artifacts $(HUB)/node_modules $(LAB_EXTENSION)/node_modules
