#!/usr/bin/env bash
# The worked example, start to end (README.md beside this file): outer-trains a learned optimizer
# for MLPs on scikit-learn's 8x8 digits, compares it with learning-rate-tuned Adam on held-out
# tasks, then trains a held-out task with it in Keras's model.fit beside Adam. Writes the wall-clock
# seconds of each stage, and the CPU seconds of the whole, to <train_dir>/wall_clock.json.
#   bash examples/own_keras_model/run.sh [train_dir]     (default runs/digits; run again: resumes)
set -euo pipefail
cd "$(dirname "$0")/../.."
train_dir="${1:-runs/digits}"

start=$(date +%s)
.venv/bin/train_local --import_module examples/own_keras_model/digits_tasks.py \
  --gin_file examples/own_keras_model/digits.gin --train_dir "$train_dir"
trained=$(date +%s)
.venv/bin/python examples/own_keras_model/fit_with_theta.py --theta_dir "$train_dir/theta" \
  --output "$train_dir/fit_with_theta.json"
end=$(date +%s)

# The children's user and system time: the second line of the `times` builtin ("1m2.5s 0m3.1s"),
# written to a file because a subshell's `times` would be its own.
times >"$train_dir/times.txt"
cpu=$(awk -F'[ ms]' 'NR == 2 { printf "%d", $1 * 60 + $2 + $4 * 60 + $5 }' "$train_dir/times.txt")
printf '{"train_local_seconds": %d, "fit_with_theta_seconds": %d, "total_seconds": %d, ' \
  $((trained - start)) $((end - trained)) $((end - start)) >"$train_dir/wall_clock.json"
printf '"cpu_seconds": %d}\n' "$cpu" >>"$train_dir/wall_clock.json"
