# GPUs for Machine Learning — common tasks. Everything runs inside .venv/.
#   make book   build the website into _build/html (executes the episodes)
#   make test   run every check CI runs (quick + offline mode), the browser tests included
#   make test-colab   the notebooks again, with the versions of Google Colab's default runtime
#                     (RUNTIME=kaggle: Kaggle's GPU image)
PYTHON ?= python3
# Which platform runtime `make test-colab` copies: current (Colab's default) or kaggle; each is a
# folder colab/<runtime>/ with its constraints (tools/runtime_radar.py makes them).
RUNTIME ?= current
COLAB_CONSTRAINTS := colab/$(RUNTIME)/constraints.txt
# That runtime's Python minor version, read from its constraints' header ("# Python 3.13.15; ...").
COLAB_PY_VERSION = $(shell sed -n 's/^# Python \(3\.[0-9]*\)\..*/\1/p' $(COLAB_CONSTRAINTS) | head -n 1)
# Its Python: found on PATH or in pyenv unless given, e.g. COLAB_PYTHON=/usr/bin/python3.13
# $(call find_python,3.13): that Python's path, from the PATH or pyenv; empty if there is none.
find_python = $(firstword $(foreach p,python$(1) \
                  $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)) \
                  /usr/bin/python$(1) /usr/local/bin/python$(1),\
                  $(shell $(p) -c 'import sys; "%d.%d" % sys.version_info[:2] == "$(1)" and print(sys.executable)' 2>/dev/null)))
COLAB_PYTHON ?= $(call find_python,$(COLAB_PY_VERSION))
# `make test-cuda-build`: the unit tests again with PyPI's torch for Linux, the CUDA build that
# brings Triton (what a learner's Linux machine installs), in .venv-cuda, on this Python. The
# notebooks run on a CUDA build of torch in `make test-colab` (Colab's torch 2.11, Python 3.13,
# Kaggle's 2.10, Python 3.12); here every test file but the website's, which reads pages only.
CUDA_BUILD_PY_VERSION ?= 3.13
CUDA_BUILD_PYTHON ?= $(call find_python,$(CUDA_BUILD_PY_VERSION))
CUDA_VENV := .venv-cuda
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
QUICK  := GPUCOURSE_QUICK=1 GPUCOURSE_OFFLINE=1
# Where an environment lives can be given (CI keeps them outside the checkout, one per content of
# their requirements, so an unchanged runtime is not installed again: .ci/run).
COLAB_VENV  := .venv-colab-$(RUNTIME)
COLAB_STAMP := $(COLAB_VENV)/.installed-stamp
# Test workers for the unit tests and notebooks: three on two cores, because much of a test's time
# is spent waiting (for a child process, a deadline, a kernel); three finished `make test`'s first
# half in 582 s where two took 723 s on an idle 2-core machine. The browser tests keep two (Chromium
# keeps both cores busy). WORKERS=1 runs them one after the other.
WORKERS ?= 3
NOTEBOOK_TESTS := -p no:cacheprovider -n $(WORKERS) --dist loadfile --nbval-lax
# REPORT_DIR=folder: every pytest run writes its timings there as JUnit XML (.ci/report.py reads them).
junit = $(if $(REPORT_DIR),--junitxml=$(REPORT_DIR)/$(1).xml -o junit_family=xunit1)
# `make test` runs each notebook once: nbval stores its executions, outputs included, in the jupyter-cache
# the website's build reads (conftest.py --book-cache), so tests/test_book.py builds the site from them.
BOOK_CACHE := _build/test/_build/.jupyter_cache

# A runtime named wrong stops here, before anything is built.
_ := $(if $(wildcard $(COLAB_CONSTRAINTS)),,$(if $(filter test-colab,$(MAKECMDGOALS)),$(error RUNTIME=$(RUNTIME): there is no $(COLAB_CONSTRAINTS); the runtimes are: $(patsubst colab/%/constraints.txt,%,$(wildcard colab/*/constraints.txt))))))

.PHONY: install lab browser book test test-busy test-colab test-cuda-build gpu-check gpu-bundle lint exercises sync clean help

help:
	@echo "make install    create .venv and install the pinned requirements"
	@echo "make lab        open the course in JupyterLab (LAB_ARGS=--no-browser etc. are passed on)"
	@echo "make book       build the site into _build/html (executes notebooks, cached)"
	@echo "make test       run all tests in quick+offline mode (what CI runs); finds or installs Chromium"
	@echo "make test-busy  make test beside LOAD=8 CPU-bound processes (a load near 10 on 2 cores)"
	@echo "make test-colab run every notebook with the versions of Colab's default runtime (.venv-colab-current)"
	@echo "                RUNTIME=kaggle: the same with Kaggle's GPU image (.venv-colab-kaggle, Python 3.12)"
	@echo "make test-cuda-build  the unit tests again with PyPI's CUDA build of torch and Triton (.venv-cuda, Python 3.13)"
	@echo "make gpu-check  run every episode at this machine's size; write gpucourse/references/<device>.json"
	@echo "                GPU_CHECK_ARGS=\"--plan\", \"--chunk 1/2\", \"--quick\": chunks of <= 9 min, a smoke pass"
	@echo "make gpu-bundle wheels gpu-check needs on a GPU node without internet (BUNDLE_PYTHON=3.12)"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make sync       point Colab and Kaggle badges and setup cells at the repo in _config.yml"
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

# JupyterLab on this folder, the first episode open; its notebooks run on .venv's Python.
lab: $(STAMP)
	$(VENV)/bin/jupyter-lab --ServerApp.root_dir="$(CURDIR)" $(LAB_ARGS) episodes/01-what-is-a-gpu.ipynb

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@echo "Open _build/html/index.html in a browser."

browser: $(STAMP)
	@$(PY) tools/ensure_browser.py

# First the unit tests and every notebook (nbval, $(WORKERS) workers), then the website built from
# those executions and read in Chromium (two workers; the first builds, the other waits for it).
test: $(STAMP) browser
	$(QUICK) $(PY) -m pytest $(NOTEBOOK_TESTS) --book-cache=$(BOOK_CACHE) $(call junit,test) \
	    tests episodes solutions exercises --ignore=tests/test_book.py
	$(QUICK) $(PY) -m pytest -p no:cacheprovider -n 2 --book-cache=$(BOOK_CACHE) $(call junit,test-book) \
	    tests/test_book.py

# `make test-busy`: the same tests while LOAD CPU-bound processes keep the machine busy (8: a load
# average near 10 on 2 cores); tools/busy.py stops them afterwards, even on a failure or Ctrl-C.
# TESTS=... narrows it, e.g. TESTS="tests/test_distributed.py episodes/09-more-than-one-gpu.ipynb";
# BUSY_PYTEST="-p no:cacheprovider --nbval-lax" runs it without test workers.
LOAD ?= 8
TESTS ?= tests episodes solutions exercises
BUSY_PYTEST ?= $(NOTEBOOK_TESTS)
test-busy: $(STAMP) browser
	$(QUICK) $(PY) tools/busy.py --load $(LOAD) -- $(PY) -m pytest $(BUSY_PYTEST) $(TESTS)

$(COLAB_STAMP): colab/requirements.txt $(COLAB_CONSTRAINTS)
	@test -n "$(COLAB_PYTHON)" || { echo "make test-colab RUNTIME=$(RUNTIME) needs Python $(COLAB_PY_VERSION) (that Colab runtime's); set COLAB_PYTHON=/path/to/python$(COLAB_PY_VERSION)"; exit 1; }
	rm -rf $(COLAB_VENV)
	$(COLAB_PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COLAB_VENV)/bin/python -m pip install -r colab/requirements.txt -c $(COLAB_CONSTRAINTS)
	$(COLAB_VENV)/bin/python tools/colab_install_check.py baseline
	touch $(COLAB_STAMP)

test-colab: $(COLAB_STAMP)
	@echo "== Colab runtime: $(RUNTIME) (Python $(COLAB_PY_VERSION), $(COLAB_CONSTRAINTS))"
	$(COLAB_VENV)/bin/python tools/colab_install_check.py install
	$(QUICK) $(COLAB_VENV)/bin/python -m pytest $(NOTEBOOK_TESTS) $(call junit,test-colab-$(RUNTIME)) \
	    $(if $(wildcard colab/$(RUNTIME)/stops.txt),--runtime-stops=colab/$(RUNTIME)/stops.txt) \
	    episodes solutions exercises
	@# Episode 4 again on Keras 3's PyTorch backend, which the platform's Keras also runs
	KERAS_BACKEND=torch $(QUICK) $(COLAB_VENV)/bin/python -m pytest -p no:cacheprovider --nbval-lax \
	    $(call junit,test-colab-$(RUNTIME)-keras-torch) episodes/04-keras-cnn.ipynb solutions/04-keras-cnn.ipynb

test-cuda-build:
	@test -n "$(CUDA_BUILD_PYTHON)" || { echo "make test-cuda-build needs Python $(CUDA_BUILD_PY_VERSION); set CUDA_BUILD_PYTHON=/path/to/python3.12 or 3.13"; exit 1; }
	$(MAKE) install PYTHON=$(CUDA_BUILD_PYTHON) VENV=$(CUDA_VENV)
	@$(CUDA_VENV)/bin/python -c "import torch, triton; assert torch.version.cuda, 'PyPI gave a CPU build of torch here (not Linux x86_64?)'; print('== torch', torch.__version__, '(CUDA', torch.version.cuda + ') with triton', triton.__version__)"
	$(QUICK) $(CUDA_VENV)/bin/python -m pytest -p no:cacheprovider -n $(WORKERS) --dist loadfile $(call junit,test-cuda-build) \
	    tests --ignore=tests/test_book.py

# On a GPU machine without the network (no .venv can be made), the system Python is used;
# the notebook runner then comes from gpu-bundle/ (CONTRIBUTING.md, "GPU reference runs").
# GPU_CHECK_ARGS are passed on, e.g. GPU_CHECK_ARGS="--chunk 1/2" or "--quick" or "--plan".
GPU_CHECK_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
gpu-check:
	$(GPU_CHECK_PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

# The wheels gpu-check needs on a node with only Python and torch (list: tools/gpu-bundle.txt),
# for BUNDLE_PYTHON (default: the version of the Python that runs the tool); needs PyPI.
BUNDLE_PYTHON ?=
gpu-bundle:
	$(GPU_CHECK_PYTHON) tools/gpu_bundle.py $(if $(BUNDLE_PYTHON),--python $(BUNDLE_PYTHON))

lint: $(STAMP)
	$(PY) tools/make_exercises.py --check
	$(PY) tools/sync_repo_url.py --check

exercises: $(STAMP)
	$(PY) tools/make_exercises.py

sync: $(STAMP)
	$(PY) tools/sync_repo_url.py

clean:
	rm -rf _build .pytest_cache
