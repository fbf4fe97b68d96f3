# Two entry points: `make run` and `make test`. Both install into .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install run test lint bench engines clean

# The hot path is compiled with mypyc at install (setup.py, autotune/native.py): editing one
# of its sources reinstalls, which rebuilds it (a stale build refuses to import).
NATIVE_SRC := $(shell $(PYTHON) autotune/native.py --sources)

$(VENV)/.installed: pyproject.toml setup.py autotune/native.py $(NATIVE_SRC)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cluster,torch]' torch==2.13.0
	@# pip -q hides setup.py's warning when mypyc falls back to pure Python (2x slower)
	@echo "autotune hot path: $$($(PY) autotune/native.py --status | tail -1)"
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) -m autotune.cli serve --demo

test: install lint
	bash scripts/test-services.sh
	$(PY) -m pytest -q $(PYTEST_ARGS)

# ruff (pyflakes, imports, builtins, line length), mypy over the whole package, and the
# layering contract (import-linter; pyproject.toml's [tool.importlinter])
lint: install
	$(PY) -m ruff check autotune tests benchmarks setup.py
	$(PY) -m mypy autotune
	$(VENV)/bin/lint-imports --no-cache

bench: install
	$(PY) benchmarks/kernels.py

# ONNX Runtime and OpenVINO (the `engines` extra's packages, without reinstalling autotune),
# and the torchvision release of the installed torch (0.(m+15) for torch 2.m) without its
# dependencies: PyPI's wheels pin the CUDA build of torch. Its compiled ops do not load
# beside a CPU torch; the classification models do not need them.
ENGINES_EXTRA := import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["engines"]))
TORCHVISION := import torch; print(int(torch.__version__.split(".")[1]) + 15)
engines: install
	$(PY) -m pip install -q $$($(PY) -c '$(ENGINES_EXTRA)')
	$(PY) -m pip install -q --no-deps "torchvision==0.$$($(PY) -c '$(TORCHVISION)').*"

clean:
	test ! -f autotune/native.py || $(PYTHON) autotune/native.py --clean
	rm -rf $(VENV) *.egg-info .pytest_cache build
