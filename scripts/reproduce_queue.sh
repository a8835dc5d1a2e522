#!/usr/bin/env bash
# One worker through the reproduction queue (scripts/grid.txt: "data set  model  seed" a line, in the order
# they should be trained). Start one worker per free core; each takes the first cell that is neither stored in
# results/ nor claimed by a live worker, trains, diagnoses and commits it with scripts/reproduce_cells.sh, and
# goes on until the queue is done. A cell that was started before (by any worker, in any session) comes first and
# resumes in the run folder that holds it (runs/repro*/, runs/evidence/); a new cell goes to $GRID.
#   scripts/reproduce_queue.sh [QUEUE]            # e.g. twice, in the background, on a 2-core machine
#   scripts/reproduce_queue.sh --status [QUEUE]   # cells stored / planned, the ones being trained, the next ones,
#                                                 # the CPU hours the open ones may take, and the open seeds by
#                                                 # data set and model with their hours
# Env: GRID (default runs/repro), UNTIL (a time `date -d` reads, e.g. 08:05, a bare clock time already past being
# tomorrow's: start no cell whose estimated cost, as in --status but the slowest stored seed of the same model and data
# set rather than their mean (seeds stop at very different epochs), scaled by how fast this worker's finished cells went
# per epoch against the stored ones, would not end by then; a started cell is costed by the epochs its patience still
# allows and its diagnosis, so one near its end is not passed over; a cell cut off resumes from its last epoch where its
# run folder outlives the machine), and those of scripts/reproduce_cells.sh. A failed cell is skipped (its run folder
# keeps error.txt) and not retried by this worker. EVIDENCE=1: a cell counts as stored only with its per-user evidence
# (users.npz), so a cell stored without one is trained again (its run folder kept in runs/repro* gains users.npz without
# training; else a new run in runs/evidence) and its record in results/ replaced by the new one, in the cell's own
# commit:
#   EVIDENCE=1 UNTIL=08:40 scripts/reproduce_queue.sh scripts/grid_evidence.txt
# RECIPE=sasrec/2: a cell counts as stored only when its cell.json records that training recipe (versions.recipe,
# resdom.experiments.RECIPE_VERSIONS), so the cells of an earlier recipe are trained again and replaced; with
# CODE_COMMIT (scripts/reproduce_cells.sh) every cell trains from that commit's code:
#   STORE=results-sasrec2 COSTS=results STAGING=1 RECIPE=sasrec/2 CODE_COMMIT=a98357d8 UNTIL=19:30 \
#     nice -n 19 scripts/reproduce_queue.sh scripts/grid_recipe2.txt
# A stored cell whose diagnostics CODE_COMMIT's code read differently from the checkout's (a query-token model's
# recovery, scripts/rediagnose_cells.py --stale) is diagnosed again with the checkout's code as soon as it is stored.
# (COSTS=results: the store whose cells cost the open ones, default $STORE; a staging store, scripts/reproduce_cells.sh:
# the new recipe's cells wait there until every cell compared with them
# is retrained, then replace results/'s together)
set -uo pipefail
cd "$(dirname "$0")/.."
STATUS=0; [ "${1:-}" = --status ] && { STATUS=1; shift; }
QUEUE=${1:-scripts/grid.txt}
STORE=${STORE:-results}
CLAIMS=runs/claims
EVIDENCE=${EVIDENCE:-0}
RECIPE=${RECIPE:-}
[ "$EVIDENCE" = 1 ] && GRID=${GRID:-runs/evidence}
if [ -n "${UNTIL:-}" ]; then  # read once, as a moment: a bare clock time already past today is tomorrow's (UNTIL=01:10
  # set at 22:45 means the night ahead, not the hours gone); any other time already past is refused, not taken as
  # "no cell fits"
  UNTIL_S=$(date -d "$UNTIL" +%s 2>/dev/null) || { echo "UNTIL=$UNTIL: not a time date -d reads (e.g. 08:05)" >&2; exit 2; }
  if [ "$UNTIL_S" -le "$(date +%s)" ]; then
    [[ "$UNTIL" =~ ^[0-9]{1,2}:[0-9]{2}(:[0-9]{2})?$ ]] || { echo "UNTIL=$UNTIL: already past" >&2; exit 2; }
    UNTIL_S=$(date -d "tomorrow $UNTIL" +%s)
  fi
  UNTIL="$(date -d "@$UNTIL_S" '+%Y-%m-%d %H:%M')"
fi

cells() {  # the queue's cells, "data set  model  seed" a line, comments and blank lines left out; those started
  # before (their run folder holds an epoch log) first, each group in the queue's order: finishing a cell costs less
  # than starting one, and a worker stopped at UNTIL leaves fewer cells half-trained
  local lines started=() rest=() dataset label seed
  lines=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$QUEUE")
  while read -r dataset label seed _; do
    [ -z "$dataset" ] && continue
    if started "$dataset" "$label" "$seed"; then
      started+=("$dataset $label $seed")
    else rest+=("$dataset $label $seed"); fi
  done <<<"$lines"
  [ "${#started[@]}${#rest[@]}" = 00 ] || printf '%s\n' "${started[@]}" "${rest[@]}"
}
stored() {  # the cell is in the store (with EVIDENCE=1: and has its users.npz; with RECIPE: trained with that recipe)
  local cell="$STORE/$1/$2/seed$3"
  [ -f "$cell/cell.json" ] && { [ "$EVIDENCE" != 1 ] || [ -f "$cell/users.npz" ]; } \
    && { [ -z "$RECIPE" ] || grep -q "\"recipe\": \"$RECIPE\"" "$cell/cell.json"; }
}
grid_of() {  # the run folder that holds the cell (where it was started), else $GRID
  local dir
  for dir in runs/repro*/ runs/evidence/; do [ -d "$dir$1/$2/seed$3" ] && { echo "${dir%/}"; return; }; done
  echo "${GRID:-runs/repro}"
}
run_of() {  # DATA SET MODEL SEED: the cell's run folder (grid_of's)
  echo "$(grid_of "$1" "$2" "$3")/$1/$2/seed$3"
}
started() {  # DATA SET MODEL SEED: the cell's run folder holds an epoch log
  [ -f "$(run_of "$1" "$2" "$3")/metrics.jsonl" ]
}
training() {  # a trainer (a worker's or anyone's) holds the run's lock
  local lock="$1/$2/$3/seed$4/.lock"
  [ -f "$lock" ] && ! flock -n "$lock" true
}
claimed() {  # a live worker holds the cell's claim (runs/claims/, see claim below)
  local owner; owner=$(cat "$CLAIMS/$1/pid" 2>/dev/null) || return 1
  [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null
}
epoch_log() {  # RUN MODE [SECONDS]: what a cell's epoch log (metrics.jsonl) says of it. MODE progress: ", epoch E
  # (best B, ...)" of a started cell, nothing for a new one. MODE seconds: of a cell whose whole estimate is SECONDS,
  # the seconds left: all of them for a new cell; for a started one, its last epoch's seconds times the epochs its
  # patience still allows (none once training has finished: metrics.json), plus a twentieth of the estimate for its
  # diagnosis (1-3% of a stored cell's cost), never more than the whole estimate. It counts no improvement to come,
  # so it errs on the short side; a cell cut off at UNTIL resumes from its last epoch.
  .venv/bin/python - "$@" <<'PY'
import json, sys
from pathlib import Path
run, mode = Path(sys.argv[1]), sys.argv[2]
log = run / "metrics.jsonl"
lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
if lines:
    last = lines[-1]
    patience = json.loads((run / "config.json").read_text()).get("train", {}).get("patience", 10)
    left = last["best_epoch"] + patience - last["epoch"]
if mode == "progress":
    if lines:
        print(f", epoch {last['epoch']} (best {last['best_epoch']}, last epoch {last['seconds'] / 60:.1f} min, "
              f"at most {left} more unless it improves)", end="")
else:
    whole = int(sys.argv[3])
    if (run / "metrics.json").exists():
        print(min(whole, whole // 20))
    elif lines:
        print(min(whole, round(last["seconds"] * max(left, 0)) + whole // 20))
    else:
        print(whole)
PY
}
progress() {  # DATA SET MODEL SEED: ", epoch E (best B, ...)" of a started cell; nothing for a new one
  started "$1" "$2" "$3" || return 0
  epoch_log "$(run_of "$1" "$2" "$3")" progress
}
with_left() {  # CELL...: each "data set  model  seed" a line, a started one with what is left of it (epoch_log ...
  # seconds of its mean estimate) as a fourth field, which estimate then counts instead of a whole cell
  local c
  for c in "$@"; do
    if started $c; then echo "$c $(epoch_log "$(run_of $c)" seconds "$(estimate "$c" mean)")"; else echo "$c"; fi
  done
}

estimate() {  # CELLS [seconds|mean|groups]: the cells not stored, "data set  model  seed [seconds left]" a line ->
  # the CPU hours they may take (a sentence), or each cell's estimated seconds, a line each (seconds: the slowest
  # stored seed's, which UNTIL is held to; mean: their mean), or the open seeds of each data set and model with their
  # hours (groups). A started cell's fourth field, what is left of it (epoch_log ... seconds), replaces its estimate
  .venv/bin/python - "${COSTS:-$STORE}" "$1" "${2:-}" <<'PY'
import json, statistics, sys
from pathlib import Path
# (data set, model) -> training + diagnosis seconds of each stored cell (every), and of those with their per-user
# evidence (fresh: trained by the current code; the older cells ran older code, often on a machine that also ran
# benchmarks, so where a data set and model has fresh cells only those count)
open_cells = [line.split() for line in sys.argv[2].splitlines() if line.strip()]
def load(value, leave=()):  # value(cell.json) of each stored cell (None: not counted) but those in leave, as
    # (fresh, every)
    every, fresh = {}, {}
    for f in Path(sys.argv[1]).glob("*/*/seed*/cell.json"):
        if tuple(f.parts[-4:-2]) + (f.parts[-2][4:],) in leave:
            continue
        v = value(json.loads(f.read_text()))
        for cost in (() if v is None else (every, fresh) if (f.parent / "users.npz").exists() else (every,)):
            cost.setdefault((f.parts[-4], f.parts[-3]), []).append(v)
    return fresh, every
fresh, every = load(lambda c: c["compute"].get("train_seconds", 0) + c["compute"].get("diagnose_seconds", 0))
def scaled(cost, dataset, model):  # the model's cost on other data sets, each times how much more (or less) a
    # model stored on both cost on this one than there (SASRec's ratio where it has one): None where no pair has it
    mean = lambda d, m: statistics.mean(cost[(d, m)])
    out = []
    for other in sorted({d for d, m in cost if m == model and d != dataset}):
        refs = [m for d, m in cost if d == dataset and (other, m) in cost and mean(other, m) > 0]
        if refs:
            ref = "sasrec" if "sasrec" in refs else sorted(refs)[0]
            out.append(mean(other, model) * mean(dataset, ref) / mean(other, ref))
    return statistics.mean(out) if out else None
def guess(dataset, model, pick=statistics.mean, costs=(fresh, every)):  # the same model on this data set (its
    # fresh cells where it has some; pick=max: the costliest of them), else scaled from others (fresh cells first),
    # else the model on any data set, else any cell
    fresh, every = costs
    for cost in (fresh, every):
        if (dataset, model) in cost:
            return pick(cost[(dataset, model)])
    for cost in (fresh, every):
        known = scaled(cost, dataset, model)
        if known is not None:
            return known
    for pick in (lambda k: k[1] == model, lambda k: True):
        xs = [x for k, v in every.items() if pick(k) for x in v]
        if xs:
            return statistics.mean(xs)
    return 0.0
def left(cell):  # the seconds a cell may still take: what is left of a started one, else the mean estimate
    return float(cell[3]) if len(cell) > 3 else guess(cell[0], cell[1])
if sys.argv[3] in ("seconds", "mean"):  # seconds, what UNTIL is held to: a seed may take as long as the slowest
    for d, m, *_ in open_cells:  # stored one did
        print(round(guess(d, m, max if sys.argv[3] == "seconds" else statistics.mean)))
elif sys.argv[3] == "epochs":  # of a cell just stored, "data set  model  seed  epochs": what it would have cost at
    # the other stored cells' speed, their seconds per epoch times its epochs plus their diagnosis (nothing where no
    # other cell records its epochs): a seed that stopped early is not taken for a faster machine
    d, m, s, epochs = open_cells[0][:4]
    per_epoch = load(lambda c: c["compute"].get("train_seconds", 0) / c["epochs_run"] if c.get("epochs_run") else None,
                     leave={(d, m, s)})
    if per_epoch[1] and int(epochs) > 0:
        diagnosis = load(lambda c: c["compute"].get("diagnose_seconds", 0), leave={(d, m, s)})
        print(round(guess(d, m, costs=per_epoch) * int(epochs) + guess(d, m, costs=diagnosis)))
elif sys.argv[3] == "groups":  # a line a data set and model: its open seeds and their hours, in queue order
    seeds = {}
    for cell in open_cells:
        seeds.setdefault((cell[0], cell[1]), []).append(cell)
    for (d, m), cs in seeds.items():
        print(f"  {d} {m}: seed{'s' if len(cs) > 1 else ''} {', '.join(c[2] for c in cs)} "
              f"(about {sum(left(c) for c in cs) / 3600:.1f} h)")
elif open_cells and every:
    hours = sum(left(c) for c in open_cells) / 3600
    print(f"open cells: {len(open_cells)}, about {hours:.0f} CPU hours (each costed as the stored cells of the same "
          "model on the same data set, else as the model's cells on other data sets scaled by a model stored on both, "
          "else on any; where a data set and model has cells with per-user evidence (the current code), those only; "
          "at one thread; a started cell by the epochs its patience still allows)")
PY
}

if [ "$STATUS" = 1 ]; then
  planned=0 stored=0 busy=() next=()
  while read -r dataset label seed _; do
    planned=$((planned + 1))
    if stored "$dataset" "$label" "$seed"; then stored=$((stored + 1))
    elif training "$(grid_of "$dataset" "$label" "$seed")" "$dataset" "$label" "$seed" \
      || claimed "$dataset+$label+$seed"; then  # a live worker's claim: training, or diagnosing after it
      busy+=("$dataset $label $seed")
    else next+=("$dataset $label $seed"); fi
  done < <(cells)
  echo "$stored of $planned planned cells stored in $STORE/"
  for c in "${busy[@]}"; do echo "being trained or diagnosed: $c$(progress $c)"; done
  for c in "${next[@]:0:5}"; do echo "next open: $c$(progress $c)"; done
  estimate "$(with_left "${busy[@]}" "${next[@]}")"
  [ "${#next[@]}" -gt 0 ] && { echo "open, by data set and model:"; estimate "$(with_left "${next[@]}")" groups; }
  exit 0
fi
mkdir -p "$CLAIMS"
declare -A failed=()

# This machine's speed against the stored cells': the seconds the cells this worker finished took, over what
# they would have taken at the stored cells' seconds per epoch (1 until one is finished), applied to the next
# estimates.
took=1 said=1 guess=0
fits() {  # DATA SET MODEL SEED GRID: the cell's estimated cost, at this machine's speed, ends before UNTIL (always,
  # without); leaves the unscaled estimate of the whole cell in guess (0 without UNTIL). A started cell costs what is
  # left of it (epoch_log ... seconds), not a whole one.
  guess=0
  [ -z "${UNTIL:-}" ] && return 0
  local left; left=$(( UNTIL_S - $(date +%s) ))
  guess=$(estimate "$1 $2 0" seconds)
  [ $(( $(epoch_log "$4/$1/$2/seed$3" seconds "$guess") * took / said )) -le "$left" ]
}
cost_of() {  # DATA SET MODEL SEED: the training and diagnosis seconds of the stored cell
  .venv/bin/python -c 'import json, sys; c = json.load(open(sys.argv[1]))["compute"]
print(round(c.get("train_seconds", 0) + c.get("diagnose_seconds", 0)))' "$STORE/$1/$2/seed$3/cell.json"
}
epochs_of() {  # DATA SET MODEL SEED: the epochs the stored cell ran (0 where its record does not say)
  .venv/bin/python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("epochs_run") or 0)' \
    "$STORE/$1/$2/seed$3/cell.json"
}

claim() {  # KEY: 0 when this worker now holds the cell's claim, runs/claims/KEY/pid naming it. Claims are made and
  # taken over under one lock (runs/claims/.lock), and a claim folder appears whole (made as a temporary folder
  # with its pid, then renamed into place), so a reader never sees one without its owner: one winner per cell.
  # A claim whose worker is gone (or one with no pid: left by an older worker killed half-way) is taken over.
  local dir="$CLAIMS/$1" tmp="$CLAIMS/.new.$1.$$"
  (
    flock 9 || exit 1
    owner=$(cat "$dir/pid" 2>/dev/null || echo "")
    if [ -n "$owner" ] && [ "$owner" != "$$" ] && kill -0 "$owner" 2>/dev/null; then exit 1; fi
    rm -rf "$tmp" && mkdir "$tmp" && echo $$ >"$tmp/pid" || exit 1
    rm -rf "$dir" && mv -T "$tmp" "$dir"
  ) 9>"$CLAIMS/.lock"
}
release() {  # KEY: remove the cell's claim if this worker holds it; never another worker's
  local dir="$CLAIMS/$1"
  (
    flock 9 || exit 0
    [ "$(cat "$dir/pid" 2>/dev/null)" = "$$" ] && rm -rf "$dir"
  ) 9>"$CLAIMS/.lock"
  return 0
}
reread() {  # DATA SET MODEL SEED GRID: a cell just stored whose diagnostics the code it ran (CODE_COMMIT's) read
  # differently from the checkout's (scripts/rediagnose_cells.py --stale: a query-token model's recovery offsets) is
  # diagnosed again with the checkout's code now, while its run folder is on this machine (a new machine has none),
  # and committed again (a cell of the current reading: the script names nothing, the commit finds nothing new); a
  # cell that cannot be is named and left for scripts/rediagnose_cells.py by hand
  local cell="$STORE/$1/$2/seed$3"
  .venv/bin/python scripts/rediagnose_cells.py --what recovery,users --stale --store "$STORE" --runs "$4" "$cell" \
    && scripts/reproduce_cells.sh --commit "$cell" \
    || echo "$cell: not diagnosed again; run scripts/rediagnose_cells.py --what recovery,users --stale on it" >&2
}

while true; do
  next=""
  while read -r dataset label seed _; do
    key="$dataset+$label+$seed"
    stored "$dataset" "$label" "$seed" && continue
    [ -n "${failed[$key]:-}" ] && continue
    grid=$(grid_of "$dataset" "$label" "$seed")
    # a process outside the queue trains there: leave the cell to it
    training "$grid" "$dataset" "$label" "$seed" && continue
    fits "$dataset" "$label" "$seed" "$grid" || continue
    claim "$key" || continue
    # stored between the check above and the claim (its worker has just released it): not ours to train again
    if stored "$dataset" "$label" "$seed"; then release "$key"; continue; fi
    next="$dataset $label $seed $grid"; break
  done < <(cells)
  [ -z "$next" ] && { echo "== $(date -u +%FT%TZ) queue done (or every open cell taken, or none fits before" \
    "${UNTIL:-the end})"; exit 0; }
  read -r dataset label seed grid <<<"$next"  # guess: the estimate fits made for this cell
  GRID=$grid scripts/reproduce_cells.sh "$dataset $label $seed"
  if stored "$dataset" "$label" "$seed"; then
    reread "$dataset" "$label" "$seed" "$grid"
    # said: what the cell would have cost at the stored cells' speed per epoch for the epochs it ran (a seed that
    # stopped early is not a faster machine); the whole-cell estimate where no stored cell records its epochs. A
    # cell resumed from an earlier start counts its earlier epochs on both sides
    if [ "$guess" -gt 0 ]; then
      ran=$(estimate "$dataset $label $seed $(epochs_of "$dataset" "$label" "$seed")" epochs)
      took=$(( took + $(cost_of "$dataset" "$label" "$seed") )); said=$(( said + ${ran:-$guess} ))
    fi
  else failed[$dataset+$label+$seed]=1; fi
  release "$dataset+$label+$seed"
done
