# GPUs for Machine Learning — common tasks. Everything runs inside .venv/.
#   make book   build the website into _build/html (executes the episodes)
#   make test   run every check CI runs (quick + offline mode)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
QUICK  := GPUCOURSE_QUICK=1 GPUCOURSE_OFFLINE=1

.PHONY: install book test lint exercises sync clean help

help:
	@echo "make install    create .venv and install the pinned requirements"
	@echo "make book       build the site into _build/html (executes notebooks, cached)"
	@echo "make test       run all tests in quick+offline mode (what CI runs)"
	@echo "make exercises  regenerate exercises/ from solutions/"
	@echo "make sync       point Colab badges and setup cells at the repo in _config.yml"
	@echo "make lint       check exercises/ and notebook links are up to date"
	@echo "make clean      remove build outputs (keeps .venv)"

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed; set PYTHON=python3.X")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --warningiserror --keep-going
	@echo "Open _build/html/index.html in a browser."

test: $(STAMP)
	$(QUICK) $(PY) -m pytest -n 2 --dist loadfile --nbval-lax \
	    tests episodes solutions exercises

lint: $(STAMP)
	$(PY) tools/make_exercises.py --check
	$(PY) tools/sync_repo_url.py --check

exercises: $(STAMP)
	$(PY) tools/make_exercises.py

sync: $(STAMP)
	$(PY) tools/sync_repo_url.py

clean:
	rm -rf _build .pytest_cache
