#!/usr/bin/env bash
# Make a separate virtual environment with RecBole 1.2.1 for scripts/make_recbole_fixture.py and
# scripts/make_recbole_ml100k_fixture.py (and benchmarks/run.py). resdom itself never needs RecBole.
#
# RecBole 1.2.1 predates numpy 2, pandas 2.2 and setuptools 70 (np.float_, DataFrame changes,
# pkg_resources), so those are pinned below. torch 2.13.0 (the version resdom is tested with) declares
# setuptools>=77, which conflicts with that pin: torch, and the two packages that depend on it (recbole,
# thop), are therefore installed with --no-deps, after everything else, so that the resolver never picks
# another torch (in particular never a CUDA build). torch's own run-time dependencies are listed here.
# RecBole's `ray` requirement is only used by its hyper-parameter tuning (recbole.quick_start) and is left out.
# RecBole's checkpoint loading calls torch.load without weights_only, which fails on torch >= 2.6: the
# fixture scripts therefore train, save and predict in one process and never reload through RecBole.
#
# Usage: bash scripts/make_recbole_venv.sh [VENV_DIR]   (default benchmarks/.recbole-venv, gitignored)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/benchmarks/.recbole-venv}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --no-input)
"${PIP[@]}" --upgrade "pip<25"
# 1. everything that does not depend on torch (RecBole's requirements with its era's pins, and torch's own)
"${PIP[@]}" "numpy<2" "pandas<2.2" "setuptools<70" "scipy<1.14" "scikit-learn<1.6" "colorlog==4.7.2" \
    "colorama==0.4.4" pyyaml tqdm tabulate texttable "psutil>=5.9" tensorboard plotly \
    filelock "typing-extensions>=4.10" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5"
# 2. torch's CPU build, without dependencies (its setuptools>=77 would fight the pin above)
if ! "${PIP[@]}" --no-deps "torch==2.13.0+cpu"; then
    echo "make_recbole_venv.sh: no CPU build of torch 2.13.0 (torch==2.13.0+cpu) is available to pip;" \
         "put its wheel into a folder named by PIP_FIND_LINKS and run again" >&2
    exit 1
fi
# 3. RecBole and thop, without dependencies (both would otherwise resolve torch again)
"${PIP[@]}" --no-deps "recbole==1.2.1" "thop==0.1.1.post2209072238"
"$VENV/bin/python" -c "import recbole, torch, numpy, pandas; print('recbole', recbole.__version__, 'torch', \
torch.__version__, 'numpy', numpy.__version__, 'pandas', pandas.__version__)"
