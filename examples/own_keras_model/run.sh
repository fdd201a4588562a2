#!/usr/bin/env bash
# The worked example, start to end (README.md beside this file): outer-trains a learned optimizer
# for MLPs on scikit-learn's 8x8 digits, compares it with learning-rate-tuned Adam on held-out
# tasks, then trains a held-out task with it in Keras's model.fit beside Adam.
#   bash examples/own_keras_model/run.sh [train_dir]     (default runs/digits; run again: resumes)
set -euo pipefail
cd "$(dirname "$0")/../.."
train_dir="${1:-runs/digits}"

.venv/bin/train_local --import_module examples/own_keras_model/digits_tasks.py \
  --gin_file examples/own_keras_model/digits.gin --train_dir "$train_dir"
.venv/bin/python examples/own_keras_model/fit_with_theta.py --theta_dir "$train_dir/theta"
