#!/usr/bin/env bash
# GPU check for resdom (under 5 minutes on one recent NVIDIA GPU): trains and diagnoses on CUDA with synthetic
# data and prints throughput. Run from anywhere:
#
#     bash benchmarks/gpu_check.sh            # uses $PYTHON, else .venv/bin/python, else python3
#
# 1. `resdom train` (the CLI, early-stopping loop, checkpoint) + `resdom diagnose --what all` on CUDA, small data;
# 2. SASRec ce_all (full-softmax CE), 20k users x 20k items, max length 200: 2 epochs, samples/s;
# 3. SASRec ce_sampled, 50k users x 1M items, max length 200: 1 epoch, full-ranking evaluation, mixing ratio
#    (norm of sums, sum of norms) vs a plain forward pass.
# Exit status 0 only when every step ran on CUDA; a machine without CUDA exits 2 at once.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${PYTHON:-}" ]]; then PY="$PYTHON"; elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 2)" || {
    echo "gpu_check: torch sees no CUDA device ($("$PY" -c 'import torch; print(torch.__version__)'))" >&2; exit 2; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
START=$SECONDS

echo "== 1. resdom train + diagnose on CUDA (CLI)"
"$PY" -m resdom train "synthetic:n_users=3000,n_items=2000,max_len=60" --out "$TMP/run" --epochs 3 --device cuda \
    --set model.max_len=50
"$PY" -m resdom diagnose "$TMP/run" --device cuda --what all --no-progress
echo "   step 1 done at $((SECONDS - START)) s"

echo "== 2./3. throughput"
"$PY" - <<'EOF'
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
import tasks  # noqa: E402
from resdom.diagnostics.common import batches, inference  # noqa: E402
from resdom.diagnostics.mixing import mixing_ratios  # noqa: E402
from resdom.evaluation.evaluate import evaluate  # noqa: E402

dev = "cuda"
print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}")


def data(users, items, max_len):
    return tasks.load_split({"synthetic": {"n_users": users, "n_items": items, "min_len": 20,
                                           "max_len": max_len + 3, "n_clusters": 20}})


def show_epochs(label, records):
    for e in records:
        print(f"{label} epoch {e['epoch']}: {e['seconds']:.1f} s, {e['samples_per_s']:,.0f} samples/s, "
              f"{e['target_positions'] / e['seconds']:,.0f} target positions/s, loss {e['loss']:.4f}")


def timed_evaluation(net, split, label):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    res = evaluate(net, split.test, device=dev)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(f"evaluation{label}: {len(split.test):,} users in {dt:.1f} s = {len(split.test) / dt:,.0f} users/s; "
          f"HR@10 {res.metrics['HR@10']:.4f} NDCG@10 {res.metrics['NDCG@10']:.4f}; "
          f"peak CUDA memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


# 2. ce_all over 20k items (the full-softmax cross-entropy with its hand-written backward) on CUDA
split = data(20_000, 20_000, 200)
net, recs, _ = tasks.train_epochs(split, {"max_len": 200, "inner_size": 256},
                                  {"objective": "ce_all"}, epochs=2, device=dev)
show_epochs("ce_all 20k users x 20k items, L 200", recs)
timed_evaluation(net, split, "")

# 3. the scale check on CUDA: 1M items, 50k users, max length 200, ce_sampled
split = data(50_000, 1_000_000, 200)
torch.cuda.reset_peak_memory_stats()
net, recs, _ = tasks.train_epochs(split, {"max_len": 200, "inner_size": 256},
                                  {"objective": "ce_sampled", "n_negatives": 256}, epochs=1, device=dev)
show_epochs("ce_sampled 50k users x 1M items, L 200", recs)
print(f"  peak CUDA memory in training {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
timed_evaluation(net, split, " over 1M items")

net.eval()
timings = {}
torch.cuda.synchronize()
t = time.perf_counter()
with inference(net):
    for _, items, _ in batches(net, split.test, 256):
        net.encode(items)
torch.cuda.synchronize()
timings["forward"] = time.perf_counter() - t
for definition in ("norm_of_sums", "sum_of_norms"):
    t = time.perf_counter()
    mix = mixing_ratios(net, split.test, definition=definition)
    torch.cuda.synchronize()
    timings[definition] = time.perf_counter() - t
    print(f"mixing {definition}: {timings[definition]:.1f} s ({timings[definition] / timings['forward']:.2f}x a "
          f"forward pass of {timings['forward']:.1f} s); pooled all {mix.pooled['all']}")
print("gpu_check: OK")
EOF
echo "gpu_check: finished in $((SECONDS - START)) s"
