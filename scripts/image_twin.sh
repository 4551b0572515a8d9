#!/usr/bin/env bash
# The GPU machines' Python packages, on this CPU: a venv with the releases their image holds
# (read off a machine in 2026-11: Python 3.12, torch 2.11.0, triton 3.6.0, lightning 2.6.6,
# numpy 2.5), synthlab installed in it, then pytest. Device time is short (15 minutes a session,
# machine start included); this finds what breaks under those releases before a session spends
# it. Run with no arguments: the whole suite (about 15 minutes on 2 cores; the CUDA tests skip,
# the Triton kernels still compile for sm_90 / sm_80 with 3.6's ptxas). Extra arguments go to
# pytest. The first run downloads about 3 GB: PyPI has torch 2.11 only as its CUDA build.
#   bash scripts/image_twin.sh                                   # the suite
#   bash scripts/image_twin.sh tests/system/test_triton_compile.py # one file
#   IMAGE_VENV=/tmp/other bash scripts/image_twin.sh             # another place for the venv
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${IMAGE_VENV:-/tmp/synthlab-image}
pins="torch==2.11.0 triton==3.6.0 lightning==2.6.6 numpy==2.5.*"
python=$(command -v python3.12 || true)
if [[ -z $python ]]; then
    echo "image_twin: python3.12 not found (the image's Python); install it or put it on PATH" >&2
    exit 2
fi
if [[ ! -x $venv/bin/python ]]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
tr ' ' '\n' <<< "$pins" > "$constraints"
# the image has no optuna or jsonlines (scripts/gpu_wheels.sh carries them there); here they come
# from PyPI with synthlab's other requirements
"$venv/bin/python" -m pip install -q -c "$constraints" $pins -e ".[test]"
"$venv/bin/python" -c "import sys, torch, triton, lightning, numpy
print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__,
      'lightning', lightning.__version__, 'numpy', numpy.__version__)"
# a cache of its own: kernels compiled by another triton are not mixed in
export TRITON_CACHE_DIR=$venv/triton-cache
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
