#!/usr/bin/env bash
# Make a separate virtual environment with RecBole 1.2.1, OUTSIDE the repository, for
# scripts/make_recbole_fixture.py. resdom itself never needs RecBole.
#
# RecBole 1.2.1 predates numpy 2, pandas 2.2 and setuptools 70 (np.float_, DataFrame changes,
# pkg_resources). Its own checkpoint loading calls torch.load without weights_only, which fails on
# torch >= 2.6: the fixture script therefore trains, saves and predicts in one process and never
# reloads through RecBole. The resolver picks an older torch for RecBole's dependencies; torch 2.13.0
# (the version resdom is tested with) is put back afterwards without dependencies.
#
# Usage: bash scripts/make_recbole_venv.sh [VENV_DIR]   (default /work/recbole-venv)
set -euo pipefail
VENV="${1:-/work/recbole-venv}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --upgrade "pip<25"
"$VENV/bin/pip" install "recbole==1.2.1" "numpy<2" "pandas<2.2" "setuptools<70" "scipy<1.14" \
    "scikit-learn<1.6" "colorlog==4.7.2" "colorama==0.4.4" pyyaml tqdm tabulate texttable psutil thop \
    tensorboard plotly
# the CPU build where the machine has it, else the index's build
"$VENV/bin/pip" install --no-deps "torch==2.13.0+cpu" || "$VENV/bin/pip" install --no-deps "torch==2.13.0"
"$VENV/bin/python" -c "import recbole, torch, numpy; print('recbole', recbole.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
