#!/usr/bin/env bash
# STAIR on a lent GPU (the device tool's machine): whole books, all test questions. Prepared here by
#   python benchmarks/stair.py prepare-gpu        # writes .stair_gpu/: job.json, model.gguf.part-NN, model.sha256, wheels/
# The model is larger than one call may carry (64 MiB), so its parts travel in one call each on one warm machine
# (it stays warm 30 s after a call; make each next call at once): the default 0.5B is 10 parts, SmolLM2-135M 2.
#   calls 1..N-1: bash benchmarks/stair_gpu.sh stage   carry: [".stair_gpu/model.gguf.part-00"] (then -01, ...)
#   call N:       bash benchmarks/stair_gpu.sh run     carry: [the last part, ".stair_gpu/job.json",
#                                                              ".stair_gpu/model.sha256", ".stair_gpu/wheels"]
# `stage` moves the carried parts to /tmp/stair_parts; `run` adds this call's parts, checks the assembled model's
# sha256, installs the wheels the image lacks and runs `benchmarks/stair.py gpu`, writing $OUT/runs.json (bring it
# back and run `python benchmarks/stair.py collect --runs DIR` here). Nothing is downloaded on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=.stair_gpu
PARTS=/tmp/stair_parts
MODEL=/tmp/stair_model/model.gguf
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
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$GPU"/wheels/*.whl
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
OUT="${OUT:-/tmp/stair_out}"
mkdir -p "$OUT"
python3 benchmarks/stair.py gpu --job "$GPU/job.json" --model "$MODEL" --out "$OUT" --budget-s "${BUDGET_S:-90}" \
  2>&1 | tee "$OUT/gpu.log"
