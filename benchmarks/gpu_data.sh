#!/usr/bin/env bash
# Build gpu-data/, the inputs of benchmarks/gpu_check.sh, here on the CPU (`make gpu-data`):
#   gpu-data/seq128, gpu-data/seq512   `pipelines examples` shards (train split, dupe factor 10) of the
#                                      real enwiki excerpt, with bert-base-uncased's vocabulary
#   gpu-data/vocab.txt                 that vocabulary (shards record its path on this machine;
#                                      on the GPU machine gpu_check.sh passes --vocab)
# About 30 MB in all (53k examples at 128, 16k at 512), under the 64 MiB a device run may carry (`carry: ["gpu-data"]`); ignored by git.
# Inputs: ../shared/data (the excerpt and the vocabulary) or WIKI_DUMP=... VOCAB=...; needs .venv.
set -euo pipefail
DATA=${DATA:-../shared/data}
WIKI_DUMP=${WIKI_DUMP:-$DATA/wiki/gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2}
VOCAB=${VOCAB:-$DATA/vocab/bert-base-uncased_vocab.txt}
OUT=${OUT:-gpu-data}
BIN=${BIN:-.venv/bin}
for input in "$WIKI_DUMP" "$VOCAB"; do
  [ -f "$input" ] || { echo "gpu_data.sh: $input is missing (set WIKI_DUMP= and VOCAB=)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runner=(--runner FnApiRunner)
"$BIN/pipelines" wikipedia --input "$WIKI_DUMP" --output "$work/wiki" --num-shards 4 "${runner[@]}"
"$BIN/pipelines" corpus --input "$work/wiki" --output "$work/corpus" --num-shards 2 "${runner[@]}"
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
cp "$VOCAB" "$OUT.tmp/vocab.txt"
for length in 128 512; do
  predictions=$(( length == 128 ? 20 : 80 ))  # BERT's max_predictions_per_seq for each phase
  "$BIN/pipelines" examples --corpus "$work/corpus" --vocab "$VOCAB" --output "$OUT.tmp/seq$length" \
    --split train --max-seq-length "$length" --max-predictions-per-seq "$predictions" --dupe-factor 10 \
    --num-shards 8 --num-buckets 16 "${runner[@]}"
done
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
du -sh "$OUT" "$OUT"/*
