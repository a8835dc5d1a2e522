#!/usr/bin/env bash
# Train the reproduction grid cell group by cell group, one torch thread, and commit each cell to the results
# store as soon as it is finished, with docs/results.md and docs/results/ regenerated from the store. Resumable: rerun it and finished cells are skipped (stored again unchanged).
#   scripts/reproduce_cells.sh "beauty-ts sasrec-tts 1,2,3" "sports-ts sasrec-tts 1,2,3" ...
# Env: GRID (default runs/repro: run directories, not committed), STORE (default results), DATA_DIR
# (default ../shared/data/raw), DEVICE (default cpu), COMMIT (default 1: git-commit each stored cell).
# Training runs from a frozen copy of src/ (runs/code-<commit>/), so editing the code while the grid runs cannot
# break a cell half way (modules are imported lazily); the report is regenerated with the checkout's own code.
set -uo pipefail
cd "$(dirname "$0")/.."
GRID=${GRID:-runs/repro}; STORE=${STORE:-results}; DATA_DIR=${DATA_DIR:-../shared/data/raw}
DEVICE=${DEVICE:-cpu}; COMMIT=${COMMIT:-1}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
CODE="runs/code-$(git rev-parse --short HEAD)"
if [ ! -d "$CODE/src" ]; then  # copied aside, then renamed: two scripts started together never share a half copy
  # SOURCE_COMMIT: what every epoch and config.json of these cells records as their code (resdom.runs.source_commit)
  dirty=$(git status --porcelain -- src | head -c1)
  mkdir -p runs && tmp=$(mktemp -d "$CODE.XXXXXX") && cp -r src "$tmp/src" \
    && echo "$(git rev-parse --short HEAD)${dirty:+-dirty}" > "$tmp/src/resdom/SOURCE_COMMIT" \
    && { mv -T "$tmp" "$CODE" 2>/dev/null || rm -rf "$tmp"; }
fi
for group in "$@"; do
  read -r dataset label seeds <<<"$group"
  echo "== $(date -u +%FT%TZ) $dataset / $label / seeds $seeds"
  PYTHONPATH="$PWD/$CODE/src" .venv/bin/resdom reproduce --datasets "$dataset" --models "$label" --seeds "$seeds" --out "$GRID" \
    --store "$STORE" --data-dir "$DATA_DIR" --device "$DEVICE" --protocol gts -q
  if [ "$COMMIT" = 1 ]; then
    for seed in ${seeds//,/ }; do
      cell="$STORE/$dataset/$label/seed$seed"
      [ -f "$cell/cell.json" ] || continue
      git add "$cell" 2>/dev/null
      git diff --cached --quiet -- "$cell" && continue
      # the document regenerated from the store in the same commit, so it never lags behind the cells
      .venv/bin/resdom report "$STORE" --out docs/results --doc docs/results.md --doc docs/remedies.md \
        --title "resdom reproduction (results store)" >/dev/null && rm -f docs/results/figures/*.pdf
      git add docs/results.md docs/remedies.md docs/results 2>/dev/null
      for try in 1 2 3 4 5; do
        git commit -q -m "results: $dataset / $label / seed $seed" -- "$cell" docs/results.md docs/remedies.md docs/results && break
        sleep 5  # another git process holds the index
      done
    done
  fi
done
