# mdsl developer entry points. Every target creates or refreshes .venv itself.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.stamp-run
STAMP_TEST := $(VENV)/.stamp-test
STAMP_BENCH := $(VENV)/.stamp-bench

.PHONY: demo test bench lint docs format stubs clean venv graphviz chromium

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel

$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	@touch $@

$(STAMP_TEST): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $@ $(STAMP_RUN)

venv: $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(PY) examples/demo.py

test: $(STAMP_TEST) graphviz chromium
	$(PY) -m pytest -n 2 tests

# Graphviz `dot` draws graphs (mdsl.viz.render, `mdsl viz`). Installed with apt-get when
# missing and possible (root, or password-less sudo); otherwise a warning, and the tests
# that render pictures skip.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
graphviz:
	@command -v dot >/dev/null 2>&1 || \
	  ( command -v apt-get >/dev/null 2>&1 && $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null ) || \
	  echo "warning: Graphviz 'dot' is missing and could not be installed; picture tests skip"

# Chromium drives the HTML viewer's browser tests (Playwright with executable_path, no
# browser download). Installed like Graphviz; without it those tests skip with the reason
# (under CI=true they fail: CI must run them).
chromium:
	@command -v chromium >/dev/null 2>&1 || \
	  ( command -v apt-get >/dev/null 2>&1 && $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ) || \
	  echo "warning: chromium is missing and could not be installed; browser tests skip"

$(STAMP_BENCH): pyproject.toml $(STAMP_TEST)
	$(PY) -m pip install --quiet -e ".[test,bench]"
	@touch $@

bench: $(STAMP_BENCH)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/exported.py

# ruff, then mypy over the public API ([tool.mypy] in pyproject.toml; CONTRIBUTING.md)
lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The API reference from the docstrings (Sphinx autodoc), warnings as errors: build/docs/
docs: $(STAMP_TEST)
	$(PY) -m sphinx -b html -W --keep-going -q -d build/docs-doctrees docs/api build/docs

# the op builders' static signatures (mdsl/ops/__init__.pyi), after adding or changing an op
stubs: $(STAMP_TEST)
	$(PY) -m mdsl.tools.op_stubs

format: $(STAMP_TEST)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf build .pytest_cache
