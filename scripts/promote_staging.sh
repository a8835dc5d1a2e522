#!/usr/bin/env bash
# The staged cells of a retraining queue replace results/'s, all in one commit, and only when every cell the queue
# names is in the staging store with the queue's training recipe (cell.json's versions.recipe), so no table ever
# compares cells of two recipes:
#   scripts/promote_staging.sh results-sasrec2 scripts/grid_recipe2.txt sasrec/2
# Refuses (exit 1, nothing moved) with the number of cells still missing and the first of them, or with the cells whose
# diagnostics are of an older reading (scripts/rediagnose_cells.py --stale). After the move, the
# documents are made again from the new store (the command is printed) and tests/test_results_doc.py checks them.
# Env: COMMIT (default 1; 0: move the cells, commit nothing), DRY_RUN=1 (check only).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: scripts/promote_staging.sh STAGING_STORE QUEUE RECIPE" >&2; exit 2; }
STAGE=${1%/} QUEUE=$2 RECIPE=$3
[ -d "$STAGE" ] || { echo "$STAGE: no such staging store" >&2; exit 2; }
[ -f "$QUEUE" ] || { echo "$QUEUE: no such queue file" >&2; exit 2; }
recipe_of() {  # CELL.JSON: its versions.recipe, "none" where the file is absent, unreadable or says none
  .venv/bin/python -c 'import json, sys
try:
    print(json.load(open(sys.argv[1])).get("versions", {}).get("recipe") or "none")
except (OSError, ValueError, AttributeError):
    print("none")' "$1"
}
cells=() missing=()
while read -r dataset label seed _; do
  cell="$dataset/$label/seed$seed"
  cells+=("$cell")
  got=$(recipe_of "$STAGE/$cell/cell.json")
  [ "$got" = "$RECIPE" ] || missing+=("$cell (recipe: $got)")
done < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$QUEUE")
if [ ${#missing[@]} -gt 0 ]; then
  echo "$STAGE: ${#missing[@]} of ${#cells[@]} cells of $QUEUE not yet stored with recipe $RECIPE, e.g." \
    "${missing[0]}; nothing moved" >&2
  exit 1
fi
# a cell whose diagnostics the queue's frozen code read differently from the checkout's (the queue diagnoses such a
# cell again as soon as it is stored, while its run folder is there): not promoted with the older reading
stale=$(.venv/bin/python - "$STAGE" "${cells[@]}" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from rediagnose_cells import stale_reading
print(" ".join(c for c in sys.argv[2:] if stale_reading(Path(sys.argv[1]) / c)))
PY
)
if [ -n "$stale" ]; then
  echo "$STAGE: cells of an older reading, to be diagnosed again first (scripts/rediagnose_cells.py --what" \
    "recovery,users --stale --store $STAGE, on their run folders): $stale; nothing moved" >&2
  exit 1
fi
[ "${DRY_RUN:-0}" = 1 ] && { echo "$STAGE: all ${#cells[@]} cells of $QUEUE stored with recipe $RECIPE"; exit 0; }
for cell in "${cells[@]}"; do
  [ -e "results/$cell" ] && git rm -r -q "results/$cell"
  rm -rf "results/$cell"  # what git did not track there
  mkdir -p "results/$(dirname "$cell")"
  git mv "$STAGE/$cell" "results/$cell"
done
echo "moved ${#cells[@]} cells of recipe $RECIPE from $STAGE/ into results/"
if [ "${COMMIT:-1}" = 1 ]; then
  git commit -q -m "results: the ${#cells[@]} cells of recipe $RECIPE ($QUEUE) replace the earlier recipe's, together" \
    -- results "$STAGE"
  echo "committed: $(git log --oneline -1)"
fi
echo "next: .venv/bin/resdom report results --out runs/report --doc docs/results.md --doc docs/remedies.md" \
  "--tables-only, then .venv/bin/python -m pytest -q tests/test_results_doc.py"
