#!/usr/bin/env bash
# One command for a lent GPU machine: the GPU tests, then the GPU measurements docs/performance.md
# lists as unmeasured, in parts of at most ~9 minutes each (the device tool's call is 10), each step time-boxed; the
# outputs land in $OUT (the device tool brings them back) or in gpu-results/.
#   bash scripts/gpu_wheels.sh                       # here, once: the wheels the machine lacks
#   run(command="bash scripts/gpu_session.sh PART", carry=[".whl"])
# A session has 15 minutes of device time (2026-11; machine start, idle waits and every call
# included) and the machine goes back after 30 s idle, so: one part, perhaps a second called at
# once. Parts, in this order of priority (trustworthy results first):
#   paper: CoPE and RoPE at the paper's size, 3 seeds stacked per encoding (scripts/gpu_paper.py):
#       a 60-s dry run at the smoke preset, then 8 minutes of the real runs; its
#       results.jsonl comes back; a later call on the same warm machine resumes from the
#       checkpoints in /tmp/paper and skips what is recorded.
#   quick (default): tests, per-step ratios at quick and paper size (fp32, bf16, CoPE's Triton
#       kernels on and off): the GPU targets of docs/performance.md.
#   papersweep: the target "paper grid under 10 minutes on one GPU": `synthlab sweep flipflop
#       --pe cope,rope --preset paper` (48 runs of 10k steps) with $PAPERSWEEP_WORKERS workers
#       (default 8) for 9 minutes; prints the cells finished (a later call resumes the journal).
#   sweep: the main command's wall time with 1..8 workers, with and without --batch-seeds.
#   flex: the additive biases through compiled FlexAttention (SYNTHLAB_FLEX_ATTENTION=1)
#       against the float mask: tests and per-step times (off by default until this says).
#   dape: the attention kernels alone at the paper size (benchmarks/attention_kernels.py: CoPE's
#       Triton kernels at four tile sets, DAPE's Triton kernels, each against its PyTorch path and
#       SDPA), then DAPE's Triton kernels (SYNTHLAB_DAPE_TRITON=1) against the PyTorch path per
#       training step (off by default until this says; the quick part tests them).
#   graphs: torch.compile's reduce-overhead mode (CUDA graphs) at the quick size, and a profile
#       of paper-size steps (top operators, host time a step, calls that wait for the device).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-quick}
out=${OUT:-gpu-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [[ -d .whl ]] && ! python3 -c "import optuna, jsonlines" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
step() {  # step NAME SECONDS COMMAND...: run, keep the output, never stop the session
    local name=$1 limit=$2; shift 2
    echo "== $name ($(date +%T))" | tee -a "$out/summary.txt"
    timeout "$limit" "$@" > "$out/$name.txt" 2>&1
    echo "   exit $? ; $(tail -n 12 "$out/$name.txt" | tr '\n' ' ' | cut -c1-600)" | tee -a "$out/summary.txt"
}
python3 -c "import torch, lightning, triton; print('torch', torch.__version__, 'lightning', lightning.__version__,
'triton', triton.__version__, torch.cuda.get_device_name())" >> "$out/summary.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$out/summary.txt" 2>&1
if [[ $part == quick ]]; then
    # cuBLAS reads its workspace setting when its handle is made: before the first matmul of pytest
    CUBLAS_WORKSPACE_CONFIG=:4096:8 step tests 200 python3 -m pytest -v -p no:cacheprovider tests/integration/test_cuda.py \
        -k "not flex"
    step train-quick 80 python3 benchmarks/training.py --device cuda --steps 60 --skip-mfu \
        --encodings rope,nope,alibi,cope,kerple+dape:k=3
    step train-paper 120 python3 benchmarks/training.py --device cuda --steps 40 --skip-mfu --size paper \
        --encodings rope,alibi,cope,kerple+dape:k=3
    step train-paper-bf16 90 python3 benchmarks/training.py --device cuda --steps 40 --skip-mfu --size paper \
        --precision bf16-mixed --encodings rope,cope,kerple+dape:k=3
    SYNTHLAB_COPE_TRITON=0 step train-paper-cope-pytorch 50 python3 benchmarks/training.py --device cuda --steps 40 \
        --skip-mfu --size paper --encodings rope,cope
elif [[ $part == paper ]]; then  # CoPE vs RoPE at the paper's scale, 3 seeds stacked per encoding
    step paper-dry-run 60 python3 scripts/gpu_paper.py /tmp/paper-smoke --preset smoke
    step paper-runs 480 python3 scripts/gpu_paper.py /tmp/paper
    cp /tmp/paper/results.jsonl "$out/paper-results.jsonl" 2>/dev/null
elif [[ $part == flex ]]; then  # does flex beat the float mask? (off by default until it does)
    CUBLAS_WORKSPACE_CONFIG=:4096:8 step tests-flex 240 python3 -m pytest -v -p no:cacheprovider \
        tests/integration/test_cuda.py -k flex
    for on in 0 1; do
        SYNTHLAB_FLEX_ATTENTION=$on step train-paper-flex$on 140 python3 benchmarks/training.py --device cuda \
            --steps 40 --skip-mfu --size paper --encodings rope,alibi,t5,kerple,fire
    done
elif [[ $part == dape ]]; then  # do DAPE's Triton kernels beat the PyTorch path? (off until they do)
    step kernels-paper 150 python3 benchmarks/attention_kernels.py --device cuda --size paper
    for on in 0 1; do  # the first Triton call compiles its kernels: the warm-up steps take it
        SYNTHLAB_DAPE_TRITON=$on step train-paper-dape$on 150 python3 benchmarks/training.py --device cuda \
            --steps 40 --skip-mfu --size paper --encodings rope,kerple+dape:k=3,kerple+dape
    done
elif [[ $part == graphs ]]; then  # CUDA graphs, and where a step's time goes
    step train-quick-graphs 200 python3 benchmarks/training.py --device cuda --steps 60 --skip-mfu \
        --compile --compile-mode reduce-overhead --encodings rope,cope
    step profile-paper 180 python3 benchmarks/profile_step.py --device cuda --size paper \
        --pe rope,cope,kerple+dape:k=3 --steps 5 --trace-dir "$out"
elif [[ $part == papersweep ]]; then  # the paper grid's wall time on one GPU
    step paper-sweep 540 python3 -m synthlab.cli sweep flipflop --pe cope,rope --preset paper \
        --workers "${PAPERSWEEP_WORKERS:-8}" --out /tmp/papersweep --quiet
    python3 -c "import json, sys; recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f'{sum(r.get(\"status\") == \"ok\" for r in recs)} of 48 paper cells finished so far')" \
        /tmp/papersweep/results.jsonl 2>&1 | tee -a "$out/summary.txt"
    cp /tmp/papersweep/results.jsonl "$out/papersweep-results.jsonl" 2>/dev/null
elif [[ $part == sweep ]]; then
    step sweep-quick 330 python3 benchmarks/sweep_workers.py --preset quick --pe cope,rope --workers 1,4,8 \
        --batch-seeds both
    step main-command 200 python3 -m synthlab.cli sweep flipflop --pe cope,rope --out /tmp/main --quiet
fi
exit 0  # at most 8 files come back from $OUT: a part writes 6 at most
