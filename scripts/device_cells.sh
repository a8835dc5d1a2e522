#!/usr/bin/env bash
# Train a queue's open cells on a lent GPU machine (the `device` tool), many at a time, and store them here.
# A session that draws a device has minutes of it; a cell of the grid takes about an hour on one CPU thread.
#
#   scripts/device_cells.sh --prepare
#       here, once per session: the Python packages the device's image lacks (pydantic and its needs, for its
#       Python 3.12) as wheels in .whl/, and the raw data in .data/raw/ (a copy of DATA_DIR); both folders are
#       excluded from git in .git/info/exclude. Then call the device tool's `run` with carry [".whl", ".data"] and
#   EVIDENCE=1 bash scripts/device_cells.sh --run scripts/grid_evidence.txt SECONDS JOBS
#       there: the queue's open cells in the queue's order (open as reproduce_queue.sh counts them: no cell.json in
#       results/, with EVIDENCE=1 also no users.npz), JOBS at a time on the GPU, one CPU thread each; a cell still
#       running SECONDS from now is killed and dropped. Every finished cell is packed into $OUT/cells.tar.gz, and
#       $OUT/cells.log lists each cell's outcome (a failure with its log's tail). With 15 minutes of device time a
#       session, one call: command "EVIDENCE=1 bash scripts/device_cells.sh --run scripts/grid_gpu.txt 480 12",
#       timeout_s 590, carry [".whl", ".data"] (12 jobs: the H200 machine has 16 CPU cores; grid_gpu.txt holds the
#       cells a CPU session cannot afford, BSARec and DuoRec; grid_evidence.txt the rest, cheapest-first).
#   scripts/device_cells.sh --import PATH/cells.tar.gz
#       here: each cell unpacked into results/ where the store has none (with EVIDENCE=1 also where the stored one
#       has no users.npz) and committed with the regenerated text tables (scripts/reproduce_cells.sh --commit;
#       COMMIT=0: copied only).
# The cells record the device they were trained on (config.json); a GPU's seed k is another draw than a CPU's
# seed k (other random streams), an independent seed all the same. EPOCHS caps every cell's epochs (a dry run).
set -uo pipefail
cd "$(dirname "$0")/.."
STORE=${STORE:-results}; DATA_DIR=${DATA_DIR:-../shared/data/raw}; EVIDENCE=${EVIDENCE:-0}
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5)

stored() {  # CELL-FOLDER: in the store (with EVIDENCE=1: with its users.npz), as reproduce_queue.sh's stored()
  [ -f "$1/cell.json" ] && { [ "$EVIDENCE" != 1 ] || [ -f "$1/users.npz" ]; }
}
open_cells() {  # QUEUE: "dataset label seed" of each open cell, in the queue's order
  grep -v '^\s*#' "$1" | while read -r dataset label seed _; do
    [ -n "${seed:-}" ] || continue
    stored "$STORE/$dataset/$label/seed$seed" || echo "$dataset $label $seed"
  done
}

case "${1:-}" in
--prepare)
  for d in /.whl/ /.data/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
  rm -rf .whl && mkdir -p .whl .data
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}" || { echo "device_cells: pip download of ${WHEELS[*]} failed" >&2; exit 1; }
  rm -rf .data/raw && cp -rL "$DATA_DIR" .data/raw && chmod -R u+w .data/raw
  echo "ready: $(ls .whl | wc -l) wheels in .whl/, $(du -sh .data/raw | cut -f1) of data in .data/raw/;" \
    "run with carry [\".whl\", \".data\"]"
  ;;
--run)
  queue=${2:?usage: device_cells.sh --run QUEUE SECONDS JOBS}; seconds=${3:?SECONDS}; jobs=${4:?JOBS}
  out=${OUT:-runs/device-out}; mkdir -p "$out"
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "device_cells: installing .whl failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
  device=${DEVICE:-cuda}; data=.data/raw; [ -d "$data" ] || data=$DATA_DIR
  deadline=$(( $(date +%s) + seconds )); grid=$(mktemp -d); store=$(mktemp -d); logs=$(mktemp -d)
  mapfile -t cells < <(open_cells "$queue")
  echo "device_cells: ${#cells[@]} open cells in $queue; $jobs at a time until $(date -u -d "@$deadline" +%T) UTC" \
    | tee "$out/cells.log"
  for cell in "${cells[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    left=$(( deadline - $(date +%s) )); [ "$left" -gt "${MIN_LEFT:-60}" ] || break  # no time to train one more
    read -r dataset label seed <<<"$cell"
    timeout "$left" python3 -m resdom reproduce --datasets "$dataset" --models "$label" --seeds "$seed" \
      --out "$grid" --store "$store" --data-dir "$data" --device "$device" --protocol gts --no-progress \
      ${EPOCHS:+--epochs "$EPOCHS"} \
      > "$logs/$dataset+$label+$seed.log" 2>&1 &
  done
  wait
  stored=0
  for cell in "${cells[@]}"; do
    read -r dataset label seed <<<"$cell"
    log="$logs/$dataset+$label+$seed.log"
    [ -f "$log" ] || { echo "not started (no time left): $dataset $label $seed" >> "$out/cells.log"; continue; }
    if [ -f "$store/$dataset/$label/seed$seed/cell.json" ]; then
      stored=$((stored + 1)); echo "stored: $dataset $label $seed" >> "$out/cells.log"
    else
      { echo "not stored (failed or past the deadline): $dataset $label $seed"; tail -n 5 "$log" | sed 's/^/  > /'; } \
        >> "$out/cells.log"
    fi
  done
  tar -czf "$out/cells.tar.gz" -C "$store" .
  echo "device_cells: $stored cells stored in $out/cells.tar.gz" | tee -a "$out/cells.log"
  ;;
--import)
  archive=${2:?usage: device_cells.sh --import PATH/cells.tar.gz}
  [ -f "$archive" ] || { echo "device_cells: $archive: no such file" >&2; exit 2; }
  tmp=$(mktemp -d); tar -xzf "$archive" -C "$tmp" || { echo "device_cells: $archive: not a gzip tar" >&2; exit 2; }
  status=0
  while read -r found; do
    rel=${found#"$tmp"/}; rel=${rel#./}; rel=${rel%/cell.json}; dest="$STORE/$rel"
    if stored "$dest"; then echo "kept: $dest (already stored)"; continue; fi
    rm -rf "$dest" && mkdir -p "$(dirname "$dest")" && cp -r "$(dirname "$found")" "$dest" \
      && { [ "${COMMIT:-1}" != 1 ] || scripts/reproduce_cells.sh --commit "$dest"; } && echo "imported: $dest" \
      || status=1
  done < <(find "$tmp" -name cell.json | sort)
  rm -rf "$tmp"
  exit "$status"
  ;;
*)
  sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2; exit 2
  ;;
esac
