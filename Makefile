# Two entry points: `make run` and `make test`. Both install into .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
PORT ?=
# pytest-xdist processes of make test (0: none). Tests marked serial run alone after them.
TEST_WORKERS ?= 2
# The AVX2 CPU the CPU kernel tests run again as (see test-avx2).
AVX2_CPU ?= haswell
AVX2_TESTS := tests/codegen tests/schedule tests/measure tests/test_api_real.py \
	tests/frontend/test_prepacked_model.py tests/frontend/test_blocked_model.py \
	tests/frontend/test_padding.py

.PHONY: install run test test-avx2 lint bench engines clean

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
	$(PY) -m autotune.cli serve --demo $(if $(PORT),--port $(PORT))

# Most tests wait on servers, subprocesses and leases as much as they compute: they run on
# TEST_WORKERS processes, whose compile_model calls build kernels in their own process
# (AUTOTUNE_BUILD_WORKERS=1: the test processes already share out the cores); those marked
# serial (wall-clock timings, races between processes) run alone afterwards (pytest's status
# 5, none selected, is no failure).
PYTEST_RUN = $(if $(filter-out 0 1,$(TEST_WORKERS)),AUTOTUNE_BUILD_WORKERS=1) \
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not serial" $(1) && \
	{ $(PY) -m pytest -q -m serial $(1) || [ $$? -eq 5 ]; }

test: install lint
	bash scripts/test-services.sh
	$(call PYTEST_RUN,$(PYTEST_ARGS))
	$(MAKE) --no-print-directory test-avx2

# The CPU kernel tests again with `llvm` targets forced to an AVX2 CPU (AUTOTUNE_HOST_CPU:
# 256-bit vectors, 16 registers). Code for a narrower ISA runs on a wider host, so an
# AVX-512 machine catches here what would fail on an AVX2 one; on a host no wider than
# AVX2 the main run was that run already.
test-avx2: install
	@if [ "$$($(PY) -c 'from autotune.target import Target; print(Target("llvm").vector_bits)')" -le 256 ]; then \
		echo "test-avx2: this host is no wider than AVX2; the main run covered it"; \
	else \
		echo "test-avx2: $(AVX2_TESTS) as -mcpu=$(AVX2_CPU)"; \
		export AUTOTUNE_HOST_CPU=$(AVX2_CPU) && $(call PYTEST_RUN,$(PYTEST_ARGS) $(AVX2_TESTS)); \
	fi

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
