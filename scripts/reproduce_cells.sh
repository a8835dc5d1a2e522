#!/usr/bin/env bash
# Train the reproduction grid cell group by cell group, one torch thread, and commit each cell to the results
# store as soon as it is finished, with the text tables (docs/results.md, docs/remedies.md, docs/results/tables/)
# regenerated from the store. Resumable: rerun it and finished cells are skipped (stored again unchanged).
# Figures and the report page are not part of a cell's commit: make them on demand with the command below; the
# committed figures change only with the figure code, and once more when the grid's last cell is stored (a
# regeneration per session rewrites 16 PNGs, about 0.9 MB of history, for a few more seeds)
#   .venv/bin/resdom report results --out docs/results --title "resdom reproduction (results store)"
#   scripts/reproduce_cells.sh "beauty-ts sasrec-tts 1,2,3" "sports-ts sasrec-tts 1,2,3" ...
#   scripts/reproduce_cells.sh --commit results/beauty-ts/sasrec/seed1 ...   # commit cells stored by hand
# Env: GRID (default runs/repro: run directories, not committed), STORE (default results), DATA_DIR
# (default ../shared/data/raw), DEVICE (default cpu), COMMIT (default 1: git-commit each stored cell), CODE_COMMIT
# (default: the checkout's src/ as it is; a commit: that commit's src/, so a retraining queue keeps one code),
# STAGING (default 0; 1: $STORE is a staging store, e.g. results-sasrec2/ of a retraining queue, whose cells are
# committed alone: the documents, built from results/, are neither refilled nor checked until the staged cells
# replace results/'s in one move, so no table ever compares cells of two training recipes).
# The commit holds the cell and the regenerated text tables only, never a figure (see commit_cell).
# After each commit it runs the documents' hand-written readings against the store and names any that the new
# cell breaks (check_readings; the cell stays committed, make test fails until the reading is rewritten).
# Training runs from a frozen copy of src/ (runs/code-<commit>/), so editing the code while the grid runs cannot
# break a cell half way (modules are imported lazily); the report is regenerated with the checkout's own code.
set -uo pipefail
cd "$(dirname "$0")/.."
GRID=${GRID:-runs/repro}; STORE=${STORE:-results}; DATA_DIR=${DATA_DIR:-../shared/data/raw}
DEVICE=${DEVICE:-cpu}; COMMIT=${COMMIT:-1}; STAGING=${STAGING:-0}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
DOCS=(docs/results.md docs/remedies.md)
report() { .venv/bin/resdom report "$STORE" --out docs/results --tables-only "$@" >/dev/null; }
commit_cell() {  # CELL MESSAGE: commit the cell with the documents regenerated from the store, so they never lag
  # The documents are refilled on HEAD's own copies and committed through a temporary index, so an edit in
  # progress in docs/results.md or docs/remedies.md never rides along with a cell; the working copies are refilled
  # in the same pass (their prose kept). HEAD moves only if no other commit came in meanwhile (else: 1, retry).
  # The checkout's own index is only reset to the new HEAD at the end: nothing of a cell is ever staged there, so
  # a `git commit` someone makes meanwhile cannot take a cell (or its tables) with it.
  local cell=$1 msg=$2 tmp head doc heads=() works=() ok=1 docs=("${DOCS[@]}") tables=docs/results/tables
  [ "$STAGING" = 1 ] && { docs=(); tables=; }  # a staging store: the cell alone, the documents untouched
  tmp=$(mktemp -d) && head=$(git rev-parse HEAD) || return 1
  if ( export GIT_INDEX_FILE="$tmp/index"  # stored before, unchanged: nothing to commit
       git read-tree "$head" && { git add "$cell" 2>/dev/null; git diff --cached --quiet "$head" -- "$cell"; } ); then
    rm -rf "$tmp"; return 0
  fi
  for doc in "${docs[@]}"; do
    git show "$head:$doc" > "$tmp/${doc##*/}" && heads+=(--doc "$tmp/${doc##*/}") && works+=(--doc "$doc") || ok=0
  done
  # a working copy that cannot be refilled (a block being edited) is left as it is
  [ "$ok" = 1 ] && { [ "$STAGING" = 1 ] || report "${heads[@]}" "${works[@]}" || report "${heads[@]}"; } \
    || { rm -rf "$tmp"; return 1; }
  ( export GIT_INDEX_FILE="$tmp/index"
    git read-tree "$head" && git add "$cell" $tables || exit 1
    for doc in "${docs[@]}"; do
      git update-index --add --cacheinfo "100644,$(git hash-object -w "$tmp/${doc##*/}"),$doc" || exit 1
    done
    commit=$(git commit-tree "$(git write-tree)" -p "$head" -m "$msg") \
      && git update-ref HEAD "$commit" "$head" 2>/dev/null )  # fails quietly where HEAD moved: the caller retries
  ok=$?
  rm -rf "$tmp"
  if [ "$ok" = 0 ]; then  # the index's entries of these paths: the new HEAD's
    for try in 1 2 3; do git reset -q -- "$cell" $tables "${docs[@]}" && break; sleep 2; done
  fi
  return "$ok"
}
commit_with_retries() {  # CELL: its commit, "results: <data set> / <model> / seed <k>"
  local cell=${1%/} seed dataset label try
  seed=${cell##*/seed}; label=${cell%/seed*}; dataset=${label%/*}; label=${label##*/}; dataset=${dataset##*/}
  for try in 1 2 3 4 5; do
    commit_cell "$cell" "results: $dataset / $label / seed $seed" && return 0
    [ "$try" -lt 5 ] || break
    echo "$cell: another commit moved HEAD or holds the index meanwhile; commit try $((try + 1)) of 5" >&2
    sleep 5
  done
  echo "$cell: not committed after 5 tries (stored in $STORE; commit it with: $0 --commit $cell)" >&2
  return 1
}
check_readings() {  # CELL: after its commit, the hand-written readings of the documents against the store (the
  # tests of tests/test_results_doc.py but the tables' regeneration, just made: seconds). A reading the new cell
  # breaks is reported, for the next edit to rewrite (the cell stays committed: its numbers are the store's)
  [ -f tests/test_results_doc.py ] && [ -x .venv/bin/python ] && [ "$STAGING" != 1 ] || return 0
  local out
  out=$(.venv/bin/python -m pytest -q -p no:cacheprovider tests/test_results_doc.py \
    --deselect tests/test_results_doc.py::test_committed_tables_equal_what_the_store_regenerates 2>&1) && return 0
  echo "WARNING: with $1 stored, a hand-written reading of docs/results.md or docs/remedies.md no longer holds" \
    "(make test fails until it is rewritten):" >&2
  grep -E '^(FAILED|ERROR) ' <<<"$out" >&2 || tail -n 5 <<<"$out" >&2
}
if [ "${1:-}" = --commit ]; then  # commit cells of $STORE stored by hand (resdom reproduce --store)
  shift; status=0
  for cell in "$@"; do
    [ -f "$cell/cell.json" ] || { echo "$cell: not a results-store cell (no cell.json)" >&2; status=2; continue; }
    commit_with_retries "$cell" && check_readings "$cell" || status=1
  done
  exit "$status"
fi
CODE="runs/code-$(git rev-parse --short "${CODE_COMMIT:-HEAD}")"
if [ ! -d "$CODE/src" ]; then  # copied aside, then renamed: two scripts started together never share a half copy
  # SOURCE_COMMIT: what every epoch and config.json of these cells records as their code (resdom.runs.source_commit)
  if [ -n "${CODE_COMMIT:-}" ]; then  # that commit's src/ exactly, whatever the checkout holds
    mkdir -p runs && tmp=$(mktemp -d "$CODE.XXXXXX") && git archive "$CODE_COMMIT" src | tar -x -C "$tmp" \
      && git rev-parse --short "$CODE_COMMIT" > "$tmp/src/resdom/SOURCE_COMMIT" \
      && { mv -T "$tmp" "$CODE" 2>/dev/null || rm -rf "$tmp"; }
  else
    dirty=$(git status --porcelain -- src | head -c1)
    mkdir -p runs && tmp=$(mktemp -d "$CODE.XXXXXX") && cp -r src "$tmp/src" \
      && echo "$(git rev-parse --short HEAD)${dirty:+-dirty}" > "$tmp/src/resdom/SOURCE_COMMIT" \
      && { mv -T "$tmp" "$CODE" 2>/dev/null || rm -rf "$tmp"; }
  fi
fi
for group in "$@"; do
  read -r dataset label seeds <<<"$group"
  echo "== $(date -u +%FT%TZ) $dataset / $label / seeds $seeds"
  PYTHONPATH="$PWD/$CODE/src" .venv/bin/resdom reproduce --datasets "$dataset" --models "$label" --seeds "$seeds" --out "$GRID" \
    --store "$STORE" --data-dir "$DATA_DIR" --device "$DEVICE" --protocol gts -q
  if [ "$COMMIT" = 1 ]; then
    for seed in ${seeds//,/ }; do
      cell="$STORE/$dataset/$label/seed$seed"
      [ -f "$cell/cell.json" ] && commit_with_retries "$cell" && check_readings "$cell"
    done
  fi
done
