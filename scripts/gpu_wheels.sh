#!/usr/bin/env bash
# Wheels a lent GPU machine lacks (its image has torch, lightning, triton, pandas, seaborn,
# safetensors, pytest, but not optuna and what it needs, nor jsonlines), fetched here into .whl/
# (git-ignored) for its Python 3.12, x86-64. Then, with the device tool:
#   run(command="bash scripts/gpu_session.sh", carry=[".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl \
    "optuna==5.0.0" "alembic==1.20.1" "sqlalchemy==2.1.9" "colorlog==6.12.0" "mako==1.4.3" "jsonlines==4.0.0"
ls .whl
