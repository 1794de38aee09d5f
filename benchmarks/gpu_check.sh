#!/usr/bin/env bash
# The prepared GPU check (issue 24): one script, run once on a lent GPU machine, every figure as JSON.
#
#   bash benchmarks/gpu_check.sh               on the GPU machine, from the repository root
#   bash benchmarks/gpu_check.sh --cpu-smoke   here: the same commands end to end, tiny model, 3 steps
#
# The GPU machine has no network and no .venv: system python3 (torch, transformers, pyarrow, fsspec,
# click, safetensors, numpy), PYTHONPATH=$PWD. Its inputs are built here first (`make gpu-data`:
# shards at 128 and 512 of the enwiki excerpt with bert-base-uncased's vocabulary, plus vocab.txt)
# and carried along (the device tool's `carry: ["gpu-data"]`); --vocab names the carried copy.
#
# What runs, most important first, each under `timeout`, until BUDGET_S (default 400 s) is spent:
# `pretrain` BERT-base for 60 steps at seq 128 (batch 256) and 512 (batch 64) with every --batching
# layout, bf16 and fp16, compiled (the CUDA default) and eager, and CUDA graphs
# (--compile-mode reduce-overhead); the one-step pairing against transformers' BertForPreTraining on
# the same 25 real batches (benchmarks/train_step.py --device cuda); the SDPA kernel check.
# Figures: OUT/runs/NAME.json per run (steady-state tokens/s, MFU, data wait, peak memory; a failure
# with its exit status and log tail), OUT/train_step_cuda.json, OUT/machine.json, and all of them
# in OUT/gpu_check.json (benchmarks/gpu_check.py). Copy that file to benchmarks/results/ and
# `python benchmarks/run_all.py --summary-only` puts it in benchmarks/summary.md.
set -uo pipefail
MODE=gpu
case "${1:-}" in
  "") ;;
  --cpu-smoke) MODE=cpu-smoke ;;
  *) echo "usage: bash benchmarks/gpu_check.sh [--cpu-smoke]" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/gpu_check}
DATA=${GPU_DATA:-gpu-data}
SCRATCH=${SCRATCH:-$(mktemp -d /tmp/gpu_check_scratch.XXXXXX)}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$SCRATCH/inductor}  # shared by the runs: warm recompiles
if [ "$MODE" = gpu ]; then
  PYTHON=${PYTHON:-python3}
  CONFIG=base STEPS=${STEPS:-60} LOG_STEPS=10 WORKERS=8 BATCH_128=256 BATCH_512=64
  BUDGET_S=${BUDGET_S:-400} RUN_LIMIT_S=180 MIN_START_S=40
  PAIRING=(--device cuda --config base:256 --steps 20 --warmup 5 --threads 8)
else
  PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
  CONFIG=tiny STEPS=${STEPS:-3} LOG_STEPS=1 WORKERS=0 BATCH_128=8 BATCH_512=4
  BUDGET_S=${BUDGET_S:-3000} RUN_LIMIT_S=600 MIN_START_S=10
  PAIRING=(--device cpu --config tiny:8 --steps 2 --warmup 1 --threads 2)
fi
for input in "$DATA/seq128/manifest.json" "$DATA/seq512/manifest.json" "$DATA/vocab.txt"; do
  [ -f "$input" ] || { echo "gpu_check.sh: $input is missing: run \`make gpu-data\` first (on the CPU machine)" >&2; exit 1; }
done
rm -rf "$OUT/runs" "$OUT/logs"
mkdir -p "$OUT/runs" "$OUT/logs" "$SCRATCH"
trap 'rm -rf "$SCRATCH"' EXIT
deadline=$((SECONDS + BUDGET_S))
echo "gpu_check ($MODE): $PYTHON, budget ${BUDGET_S}s, figures in $OUT"
"$PYTHON" benchmarks/gpu_check.py machine "$OUT"

# time_left LIMIT: the seconds a command may take now (at most LIMIT), or nothing when too few are left
time_left() {
  local left=$((deadline - SECONDS))
  [ "$left" -ge "$MIN_START_S" ] && echo $(( left < $1 ? left : $1 ))
}

# pretrain NAME SEQ BATCHING PRECISION FLAG...: one run, summarised into OUT/runs/NAME.json
pretrain() {
  local name=$1 seq=$2 batching=$3 precision=$4
  shift 4
  local batch_var=BATCH_$seq
  local cmd=("$PYTHON" -m pretrain --shards "$DATA/seq$seq" --vocab "$DATA/vocab.txt" --config "$CONFIG"
    --output "$SCRATCH/$name" --batching "$batching" --precision "$precision" "$@"
    --global-batch-size "${!batch_var}" --max-steps "$STEPS" --log-steps "$LOG_STEPS" --save-steps "$STEPS"
    --keep-checkpoints 1 --lr 1e-4 --warmup-steps 10 --num-workers "$WORKERS")
  local limit
  if ! limit=$(time_left "$RUN_LIMIT_S"); then
    "$PYTHON" benchmarks/gpu_check.py skipped "$OUT" "$name" "not run: the time budget was spent" -- "${cmd[@]}"
    echo "$name: not run (budget spent)"
    return
  fi
  local start=$SECONDS
  timeout --kill-after=20 "$limit" "${cmd[@]}" >"$OUT/logs/$name.log" 2>&1
  local rc=$?
  "$PYTHON" benchmarks/gpu_check.py run "$OUT" "$name" "$SCRATCH/$name" "$rc" "$((SECONDS - start))" \
    "$OUT/logs/$name.log" -- "${cmd[@]}"
  rm -rf "${SCRATCH:?}/$name"  # a BERT-base checkpoint is 1.3 GB
}

# the one-step pairing against transformers, on the same real batches
pairing() {
  local name=train_step_pairing limit
  local cmd=("$PYTHON" benchmarks/train_step.py --shards "$DATA/seq128" --vocab "$DATA/vocab.txt" "${PAIRING[@]}"
    --json "$OUT/train_step_cuda.json")
  if ! limit=$(time_left 200); then
    "$PYTHON" benchmarks/gpu_check.py skipped "$OUT" "$name" "not run: the time budget was spent" -- "${cmd[@]}"
    return
  fi
  local start=$SECONDS
  timeout --kill-after=20 "$limit" "${cmd[@]}" >"$OUT/logs/$name.log" 2>&1
  local rc=$?
  "$PYTHON" benchmarks/gpu_check.py step "$OUT" "$name" "$rc" "$((SECONDS - start))" "$OUT/logs/$name.log" \
    "$OUT/train_step_cuda.json"
  tail -n 8 "$OUT/logs/$name.log"
}

pretrain seq128-padded-bf16-compiled 128 padded bf16 --compile
pairing
pretrain seq128-packed-bf16-compiled 128 packed bf16 --compile
pretrain seq128-bucketed-bf16-compiled 128 bucketed bf16 --compile
pretrain seq128-padded-bf16-eager 128 padded bf16 --no-compile
pretrain seq512-padded-bf16-compiled 512 padded bf16 --compile
pretrain seq512-packed-bf16-compiled 512 packed bf16 --compile
pretrain seq512-bucketed-bf16-compiled 512 bucketed bf16 --compile
pretrain seq128-bucketed-bf16-cudagraphs 128 bucketed bf16 --compile --compile-mode reduce-overhead
pretrain seq128-padded-fp16-compiled 128 padded fp16 --compile
pretrain seq128-packed-bf16-eager 128 packed bf16 --no-compile
pretrain seq128-bucketed-bf16-eager 128 bucketed bf16 --no-compile
pretrain seq128-packed-fp16-compiled 128 packed fp16 --compile
pretrain seq512-packed-bf16-eager 512 packed bf16 --no-compile
pretrain seq128-packed-bf16-cudagraphs 128 packed bf16 --compile --compile-mode reduce-overhead
pretrain seq512-padded-bf16-eager 512 padded bf16 --no-compile
pretrain seq128-bucketed-fp16-compiled 128 bucketed fp16 --compile

if limit=$(time_left 60); then
  timeout "$limit" "$PYTHON" benchmarks/sdpa_check.py --require-fast >"$OUT/logs/sdpa_check.log" 2>&1
  rc=$?
  "$PYTHON" -c 'import json, sys; print(json.dumps({"rc": int(sys.argv[1]), "output": open(sys.argv[2]).read().splitlines()[-20:]}))' \
    "$rc" "$OUT/logs/sdpa_check.log" >"$OUT/sdpa_check.json"
fi
"$PYTHON" benchmarks/gpu_check.py collect "$OUT"
echo "gpu_check ($MODE) done in $SECONDS s: $OUT/gpu_check.json"
