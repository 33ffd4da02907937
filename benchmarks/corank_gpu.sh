#!/usr/bin/env bash
# The LLM rerankers of benchmarks/corank.py on a lent GPU (the device tool's machine). Prepared here by
#   python benchmarks/corank_gpu.py prepare   # .corank_gpu/: job.json.gz, papers, model and encoder parts, wheels
# The 0.5B (10 parts) and the embedding model (2 parts) travel one part per call on one warm machine (it stays warm
# 30 s after a call: make each next call at once):
#   calls 1..11: bash benchmarks/corank_gpu.sh stage   carry: [".corank_gpu/model.gguf.part-00"] (then the others)
#   call 12:     bash benchmarks/corank_gpu.sh run     carry: [the last part, ".corank_gpu/job.json.gz",
#                ".corank_gpu/papers.jsonl.gz", ".corank_gpu/model.sha256", ".corank_gpu/encoder.sha256",
#                ".corank_gpu/wheels"]
# `run` assembles and checks both files, installs the wheels the image lacks and runs `corank_gpu.py run`, writing
# $OUT/runs.json (bring it back, then `python benchmarks/corank_gpu.py collect --runs DIR` here). Nothing is
# downloaded on the machine. DRY_RUN=1 runs the same steps on this CPU (PYTHON: the venv's python; no wheels;
# MODEL_PATH: a smaller GGUF; RUN_ARGS=--smoke: two queries, small pools).
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=${GPU_FOLDER:-.corank_gpu}
PARTS=${PARTS_DIR:-/tmp/corank_parts}
WORK=${WORK_DIR:-/tmp/corank_work}
PYTHON=${PYTHON:-python3}
mkdir -p "$PARTS" "$WORK"
for part in "$GPU"/*.part-*; do
  [ -e "$part" ] && cp "$part" "$PARTS/"
done
ls -l "$PARTS"
if [ "${1:-run}" = stage ]; then
  exit 0
fi
assemble() {  # name, sha file, target
  cat "$PARTS/$1".part-* > "$3"
  if ! echo "$(cat "$GPU/$2")  $3" | sha256sum -c --quiet -; then
    echo "$1 parts incomplete or wrong (was the machine still warm from the 'stage' calls?): $(ls "$PARTS")" >&2
    exit 3
  fi
}
MODEL=${MODEL_PATH:-$WORK/model.gguf}  # MODEL_PATH: a dry run's smaller model, not assembled from parts
[ -n "${MODEL_PATH:-}" ] || assemble model.gguf model.sha256 "$MODEL"
assemble encoder.tar encoder.sha256 "$WORK/encoder.tar"
tar -xf "$WORK/encoder.tar" -C "$WORK"
export PYTHONPATH=src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
DEVICE=cpu
if [ -z "${DRY_RUN:-}" ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$GPU"/wheels/*.whl
  export PYTHONPATH=/tmp/site:src
  DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
OUT="${OUT:-/tmp/corank_out}"
mkdir -p "$OUT"
"$PYTHON" benchmarks/corank_gpu.py run --model "$MODEL" --encoder "$WORK/encoder" --out "$OUT" \
  --work "$WORK" --device-name "$DEVICE" --deadline-s "${DEADLINE_S:-420}" ${RUN_ARGS:-} 2>&1 | tee "$OUT/gpu.log"
