#!/usr/bin/env bash
# Step time of examples/train_torch: zero at stages 0-3 against plain libtorch (1 rank) and
# libtorch with c10d's Gloo all-reduce (2 ranks), interleaved, for docs/libtorch.md's table.
#   bench/torch/compare_with_libtorch.sh [TRAIN_TORCH] [REPETITIONS]
# Prints "repetition|ranks and flags|median step ms|model states MB|buffers MB" per run, for
# shape A (--layers 4 --embd 256 --seq 64 --batch 16) and B (--layers 2 --embd 512 --seq 16
# --batch 4). Compare runs of one invocation only: timings on a shared machine drift.
set -euo pipefail
binary=${1:-build/dev/examples/train_torch/train_torch}
repetitions=${2:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp --suffix=.json)
trap 'rm -f "$out"' EXIT
declare -A shapes=(
  [A]="--layers 4 --embd 256 --heads 8 --seq 64 --batch 16 --steps 12"
  [B]="--layers 2 --embd 512 --heads 8 --seq 16 --batch 4 --steps 12"
)
runs=("1 --trainer plain" "1 --stage 0" "1 --stage 3" "2 --trainer ddp" "2 --stage 0" "2 --stage 1"
      "2 --stage 2" "2 --stage 3")
for shape in A B; do
  for ((rep = 1; rep <= repetitions; ++rep)); do
    for run in "${runs[@]}"; do
      read -r np flags <<<"$run"
      # shellcheck disable=SC2086 # the flags are words
      mpiexec -np "$np" --oversubscribe "$binary" ${shapes[$shape]} $flags --json "$out" >/dev/null
      python3 -c "import json,sys; j = json.load(open(sys.argv[1])); print('$shape $rep|np$np $flags|%.1f|%.3g|%.3g' % (1e3 * j['median_step_seconds'], j['model_state_bytes'] / 1e6, j['buffer_bytes'] / 1e6))" "$out"
    done
  done
done
