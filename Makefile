# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# torch's index: empty = the configured one (this project's machines and CI hold the CPU build of torch==2.13.0
# locally); on an ordinary Linux machine, where PyPI's torch==2.13.0 is the CUDA build (several GB), use
# `make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX ?=

.PHONY: setup demo test test-fast bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch==2.13.0 (CPU build) first: resdom's bare `torch` requirement would pull the multi-GB CUDA build.
setup: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || \
		$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e ".[test]"

demo: setup
	$(BIN)/resdom demo

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 -q

# the fast subset: no test marked slow (subprocesses, real data, the installed wheel)
test-fast: setup
	$(BIN)/python -m pytest -n 2 -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/run.py --setup-recbole

clean:
	rm -rf $(VENV) resdom-demo .pytest_cache
