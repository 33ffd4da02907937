#!/usr/bin/env bash
# STAIR on a lent GPU (the device tool's machine). Prepared here by
#   python benchmarks/stair.py prepare-gpu [--scope small|full]  # .stair_gpu/: plan.json, jobs/, model parts, wheels/
# The model is larger than one call may carry (64 MiB with the tree), so its parts travel in one call each on one
# warm machine (it stays warm 30 s after a call: make each next call at once): the default 0.5B is 10 parts.
#   calls 1..N-1: bash benchmarks/stair_gpu.sh stage   carry: [".stair_gpu/model.gguf.part-00"] (then -01, ...)
#   call N:       bash benchmarks/stair_gpu.sh run     carry: [the last part, ".stair_gpu/plan.json",
#                                                              ".stair_gpu/jobs", ".stair_gpu/model.sha256",
#                                                              ".stair_gpu/wheels"]
# `stage` moves the carried parts to /tmp/stair_parts; `run` adds this call's parts, checks the assembled model's
# sha256, installs the wheels the image lacks and runs `benchmarks/stair.py gpu`, writing $OUT/runs.json and the
# STAIR adapters in parts (bring them back, then `python benchmarks/stair.py collect --runs DIR` here). Nothing is
# downloaded on the machine. DRY_RUN=1 runs the same steps on this CPU (PYTHON: the venv's python; no wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=${GPU_FOLDER:-.stair_gpu}
PARTS=${PARTS_DIR:-/tmp/stair_parts}
MODEL=${MODEL_PATH:-/tmp/stair_model/model.gguf}
PYTHON=${PYTHON:-python3}
mkdir -p "$PARTS" "$(dirname "$MODEL")"
for part in "$GPU"/model.gguf.part-*; do
  [ -e "$part" ] && cp "$part" "$PARTS/"
done
ls -l "$PARTS"
if [ "${1:-run}" = stage ]; then
  exit 0
fi
cat "$PARTS"/model.gguf.part-* > "$MODEL"
if ! echo "$(cat "$GPU/model.sha256")  $MODEL" | sha256sum -c --quiet -; then
  echo "model parts incomplete or wrong (was the machine still warm from the 'stage' call?): $(ls "$PARTS")" >&2
  exit 3
fi
export PYTHONPATH=src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -z "${DRY_RUN:-}" ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$GPU"/wheels/*.whl
  export PYTHONPATH=/tmp/site:src
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
OUT="${OUT:-/tmp/stair_out}"
mkdir -p "$OUT"
"$PYTHON" benchmarks/stair.py gpu --plan "$GPU/plan.json" --model "$MODEL" --out "$OUT" \
  --budget-s "${BUDGET_S:-90}" --deadline-s "${DEADLINE_S:-400}" 2>&1 | tee "$OUT/gpu.log"
