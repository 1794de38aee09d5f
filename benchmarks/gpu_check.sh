#!/usr/bin/env bash
# One prepared GPU check (issue 5): the base config at sequence length 128, a few hundred steps in
# bf16 and in fp16 with loss scaling, on shards made on the spot from the Wikipedia excerpt;
# prints tokens/s, MFU and peak memory. Run from the repository root on a machine with a GPU:
#     bash benchmarks/gpu_check.sh            (OUT=folder STEPS=300 BATCH=128 to change)
# It needs .venv (make setup) and .cache/enwiki-excerpt.xml.bz2 (make demo fetches it).
set -euo pipefail
OUT=${OUT:-/tmp/gpu_check}
STEPS=${STEPS:-300}
BATCH=${BATCH:-128}
BIN=.venv/bin
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv
$BIN/pipelines wikipedia --input .cache/enwiki-excerpt.xml.bz2 --output "$OUT/wiki" --num-shards 4 --overwrite \
  --runner DirectRunner --direct_num_workers 8 --direct_running_mode multi_processing
$BIN/pipelines corpus --input "$OUT/wiki" --output "$OUT/corpus" --num-shards 4 --overwrite
$BIN/wordpiece train --corpus "$OUT/corpus" --output "$OUT/vocab" --vocab-size 30522 --overwrite
$BIN/pipelines examples --corpus "$OUT/corpus" --vocab "$OUT/vocab/vocab.txt" --output "$OUT/seq128" \
  --max-seq-length 128 --dupe-factor 5 --num-shards 16 --num-buckets 64 --overwrite \
  --runner DirectRunner --direct_num_workers 8 --direct_running_mode multi_processing
for precision in bf16 fp16; do
  rm -rf "$OUT/run-$precision"
  $BIN/pretrain --shards "$OUT/seq128" --config base --output "$OUT/run-$precision" \
    --global-batch-size "$BATCH" --max-steps "$STEPS" --lr 1e-4 --warmup-steps 50 --precision "$precision" \
    --log-steps 50 --save-steps "$STEPS" --num-workers 4 --quiet
  $BIN/python - "$OUT/run-$precision/metrics.jsonl" "$precision" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if '"train"' in line]
steady = rows[1:] or rows  # the first window includes start-up
mean = lambda key: sum(r.get(key, 0.0) for r in steady) / len(steady)
print(f"{sys.argv[2]}: {mean('tokens_per_s'):,.0f} tokens/s, {mean('samples_per_s'):,.0f} samples/s, "
      f"MFU {mean('mfu'):.3f}, peak memory {max(r.get('peak_memory_gb', 0) for r in rows):.1f} GiB, "
      f"data wait {mean('data_wait_share'):.3f}, skipped steps {rows[-1]['skipped_steps']}, loss {rows[-1]['loss']:.3f}")
PY
done
