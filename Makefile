# GPUs for Machine Learning — common tasks. Everything runs inside .venv/.
#   make book   build the website into _build/html (executes the episodes)
#   make test   run every check CI runs (quick + offline mode), the browser tests included
#   make test-colab   the notebooks again, in an environment with Google Colab's versions
PYTHON ?= python3
# Colab's Python (3.12): found on PATH or in pyenv unless given, e.g. COLAB_PYTHON=/usr/bin/python3.12
COLAB_PYTHON ?= $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) \
                  /usr/bin/python3.12 /usr/local/bin/python3.12,\
                  $(shell $(p) -c 'import sys; sys.version_info[:2] == (3, 12) and print(sys.executable)' 2>/dev/null)))
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
QUICK  := GPUCOURSE_QUICK=1 GPUCOURSE_OFFLINE=1
COLAB_VENV  := .venv-colab
COLAB_STAMP := $(COLAB_VENV)/.installed-stamp
NOTEBOOK_TESTS := -p no:cacheprovider -n 2 --dist loadfile --nbval-lax

.PHONY: install browser book test test-colab gpu-check lint exercises sync clean help

help:
	@echo "make install    create .venv and install the pinned requirements"
	@echo "make book       build the site into _build/html (executes notebooks, cached)"
	@echo "make test       run all tests in quick+offline mode (what CI runs); finds or installs Chromium"
	@echo "make test-colab run every notebook with Google Colab's package versions (.venv-colab)"
	@echo "make gpu-check  run every episode at this machine's size; write gpucourse/references/<device>.json"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make sync       point Colab badges and setup cells at the repo in _config.yml"
	@echo "make lint       check exercises/ and notebook links are up to date"
	@echo "make clean      remove build outputs (keeps .venv)"

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) tools/check_python.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@echo "Open _build/html/index.html in a browser."

browser: $(STAMP)
	@$(PY) tools/ensure_browser.py

test: $(STAMP) browser
	$(QUICK) $(PY) -m pytest $(NOTEBOOK_TESTS) tests episodes solutions exercises

$(COLAB_STAMP): colab/requirements.txt colab/constraints.txt
	@test -n "$(COLAB_PYTHON)" || { echo "make test-colab needs Python 3.12 (Colab's); set COLAB_PYTHON=/path/to/python3.12"; exit 1; }
	rm -rf $(COLAB_VENV)
	$(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COLAB_VENV)/bin/python -m pip install -r colab/requirements.txt
	$(COLAB_VENV)/bin/python tools/colab_install_check.py baseline
	touch $(COLAB_STAMP)

test-colab: $(COLAB_STAMP)
	$(COLAB_VENV)/bin/python tools/colab_install_check.py install
	$(QUICK) $(COLAB_VENV)/bin/python -m pytest $(NOTEBOOK_TESTS) episodes solutions exercises

# On a GPU machine without the network (no .venv can be made), the system Python is used.
GPU_CHECK_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
gpu-check:
	$(GPU_CHECK_PYTHON) tools/gpu_check.py

lint: $(STAMP)
	$(PY) tools/make_exercises.py --check
	$(PY) tools/sync_repo_url.py --check

exercises: $(STAMP)
	$(PY) tools/make_exercises.py

sync: $(STAMP)
	$(PY) tools/sync_repo_url.py

clean:
	rm -rf _build .pytest_cache
