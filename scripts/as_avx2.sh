#!/usr/bin/env bash
# Run a command as on an AVX2+FMA CPU without AVX-512, on a machine that has AVX-512: torch's own
# kernels (ATEN_CPU_CAPABILITY), MKL's (MKL_ENABLE_INSTRUCTIONS), oneDNN's (ONEDNN_MAX_CPU_ISA) and
# synthlab's native kernels (SYNTHLAB_NATIVE_MARCH=haswell, a build of their own) are all held to
# AVX2. The instruction set only: the other CPU's clock, caches and core count stay this one's.
#
#   bash scripts/as_avx2.sh python benchmarks/training.py --threads 1 --encodings rope,cope
set -euo pipefail
if (( $# == 0 )); then
    echo "usage: bash scripts/as_avx2.sh COMMAND [ARGS...]" >&2
    exit 2
fi
export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 SYNTHLAB_NATIVE_MARCH=haswell
exec "$@"
