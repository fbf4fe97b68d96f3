# Two entry points: `make run` and `make test`. Both install into .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install run test bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) -m autotune.cli serve --demo

test: install
	bash scripts/test-services.sh
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: install
	$(PY) benchmarks/kernels.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
