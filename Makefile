# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch==2.13.0 first: a bare `torch` requirement would pull a multi-GB CUDA build.
setup: $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"

demo: setup
	$(BIN)/resdom demo

test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -n 2 -q

bench: setup
	$(BIN)/python benchmarks/run.py --setup-recbole

clean:
	rm -rf $(VENV) resdom-demo .pytest_cache
