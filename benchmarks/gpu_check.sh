#!/usr/bin/env bash
# One prepared GPU check (issues 5 and 13). Run from the repository root:
#     bash benchmarks/gpu_check.sh          (OUT=folder STEPS=300 BATCH=128 SHARDS=folder to change)
# 1. benchmarks/sdpa_check.py: which SDPA kernel the padded (masked), mask-free and packed batch
#    layouts get; on CUDA it fails unless the mask-free and packed ones get flash or
#    memory-efficient attention.
# 2. pretrain at sequence length 128 in bf16 and in fp16 (loss scaling), with each --batching
#    layout (padded, bucketed, packed): tokens/s (non-padding), samples/s, MFU, peak memory, data
#    wait, loss; on shards made on the spot from the Wikipedia excerpt (or SHARDS=folder).
# On a GPU: the base model, a few hundred steps. Without CUDA it runs its CPU fallback instead (the
# tiny model, fp32, a few steps, the shared enwiki excerpt when .cache has none): the same commands,
# so the script is known to run end to end; the figures mean nothing there.
# It needs .venv (make setup) and .cache/enwiki-excerpt.xml.bz2 (make demo fetches it) on a GPU.
set -euo pipefail
OUT=${OUT:-/tmp/gpu_check}
BIN=.venv/bin
if command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv; then
  CONFIG=${CONFIG:-base} STEPS=${STEPS:-300} BATCH=${BATCH:-128} PRECISIONS=${PRECISIONS:-"bf16 fp16"}
  WORKERS=4 WARMUP=50 VOCAB_SIZE=30522 INPUT=${INPUT:-.cache/enwiki-excerpt.xml.bz2}
  RUNNER=(--runner DirectRunner --direct_num_workers 8 --direct_running_mode multi_processing)
else
  echo "no CUDA device: CPU fallback (tiny model, fp32, a few steps; the figures mean nothing)"
  CONFIG=${CONFIG:-tiny} STEPS=${STEPS:-4} BATCH=${BATCH:-8} PRECISIONS=${PRECISIONS:-fp32}
  WORKERS=0 WARMUP=2 VOCAB_SIZE=8000 INPUT=${INPUT:-.cache/enwiki-excerpt.xml.bz2}
  [ -f "$INPUT" ] || INPUT=../shared/data/wiki/gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2
  RUNNER=(--runner FnApiRunner)
fi
mkdir -p "$OUT"
$BIN/python benchmarks/sdpa_check.py --require-fast

if [ -z "${SHARDS:-}" ]; then
  SHARDS="$OUT/seq128"
  $BIN/pipelines wikipedia --input "$INPUT" --output "$OUT/wiki" --num-shards 4 --overwrite "${RUNNER[@]}"
  $BIN/pipelines corpus --input "$OUT/wiki" --output "$OUT/corpus" --num-shards 4 --overwrite "${RUNNER[@]}"
  $BIN/wordpiece train --corpus "$OUT/corpus" --output "$OUT/vocab" --vocab-size "$VOCAB_SIZE" --overwrite
  $BIN/pipelines examples --corpus "$OUT/corpus" --vocab "$OUT/vocab/vocab.txt" --output "$SHARDS" \
    --max-seq-length 128 --dupe-factor 5 --num-shards 16 --num-buckets 64 --overwrite "${RUNNER[@]}"
fi
for precision in $PRECISIONS; do
  for batching in padded bucketed packed; do
    run="$OUT/run-$precision-$batching"
    rm -rf "$run"
    $BIN/pretrain --shards "$SHARDS" --config "$CONFIG" --output "$run" --batching "$batching" \
      --global-batch-size "$BATCH" --max-steps "$STEPS" --lr 1e-4 --warmup-steps "$WARMUP" --precision "$precision" \
      --log-steps "$(( STEPS > 50 ? 50 : 1 ))" --save-steps "$STEPS" --num-workers "$WORKERS" --quiet
    $BIN/python - "$run/metrics.jsonl" "$precision $batching" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if '"train"' in line]
steady = rows[1:] or rows  # the first window includes start-up
mean = lambda key: sum(r.get(key, 0.0) for r in steady) / len(steady)
print(f"{sys.argv[2]:15s}: {mean('tokens_per_s'):,.0f} tokens/s, {mean('samples_per_s'):,.0f} samples/s, "
      f"MFU {mean('mfu'):.3f}, peak memory {max(r.get('peak_memory_gb', 0) for r in rows):.1f} GiB, "
      f"data wait {mean('data_wait_share'):.3f}, skipped steps {rows[-1]['skipped_steps']}, loss {rows[-1]['loss']:.3f}")
PY
  done
done
