#!/usr/bin/env bash
# Make a separate virtual environment with RecTools 0.19 (rectools[torch]: its SASRec and BERT4Rec on
# PyTorch Lightning) for scripts/make_rectools_fixture.py and benchmarks/run.py's RecTools peer
# (benchmarks/rectools_driver.py). resdom itself never needs RecTools.
#
# torch's CPU build 2.13.0 (the version resdom is tested with) is installed first, so that resolving
# rectools[torch] (torch >= 1.6, < 3) keeps it and never pulls another torch, in particular never a CUDA build.
# RecTools 0.19 pins numpy < 2 on Python < 3.13; torch 2.13 works with numpy 1.26.
#
# Usage: bash scripts/make_rectools_venv.sh [VENV_DIR]   (default benchmarks/.rectools-venv, gitignored)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/benchmarks/.rectools-venv}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --no-input)
# 1. torch's CPU build with its own run-time dependencies (which do not depend on torch)
"${PIP[@]}" filelock "typing-extensions>=4.12.2,<5" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" \
    "setuptools>=77"
if ! "${PIP[@]}" --no-deps "torch==2.13.0+cpu"; then
    echo "make_rectools_venv.sh: no CPU build of torch 2.13.0 (torch==2.13.0+cpu) is available to pip;" \
         "put its wheel into a folder named by PIP_FIND_LINKS and run again" >&2
    exit 1
fi
# 2. RecTools with its torch extra; the installed torch satisfies it and stays
"${PIP[@]}" "rectools[torch]==0.19.0" "numpy<2"
"$VENV/bin/python" - <<'PY'
import numpy, pandas, pytorch_lightning, rectools, torch
assert torch.__version__.startswith("2.13.0"), torch.__version__
print("rectools", rectools.__version__, "torch", torch.__version__, "lightning", pytorch_lightning.__version__,
      "numpy", numpy.__version__, "pandas", pandas.__version__)
PY
