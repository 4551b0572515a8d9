"""The GPU paths, where a CUDA GPU is visible (skipped everywhere else, CI included): CoPE's
Triton kernels against the PyTorch path on the device, bf16 autocast, ``train.compile``,
``train.deterministic`` (two runs of one seed agree), batched seeds against separate runs, no
host synchronisation in the steps between checks, pinned training batches and fused AdamW, the
additive biases through compiled FlexAttention against the float mask (outputs and gradients),
DAPE's Triton kernels against the PyTorch path.

Run on a lent GPU with ``bash scripts/gpu_session.sh`` (which also times the benchmarks)."""

from __future__ import annotations

import math
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")

CUDA = torch.device("cuda")


def _cope_reference(q_raw, q, k, v, cope, scale):
    """The PyTorch path: logits, CoPE term, causal softmax, weighted values (float64)."""
    T = q.shape[-2]
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    S = (q * scale) @ k.transpose(-2, -1)
    A = (S + cope.forward(q_raw, S, None, future)).masked_fill(future, float("-inf"))
    return torch.softmax(A, dim=-1) @ v


@pytest.mark.parametrize("T, npos, alibi", [(64, 64, False), (200, 32, False), (130, 64, True)])
def test_triton_cope_matches_the_pytorch_path_on_the_gpu(T, npos, alibi, monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed (pip install 'synthlab-pe[gpu]'; Linux only)")
    from synthlab.model.encoders.contextual import CoPE

    torch.manual_seed(0)
    B, H, D = 2, 4, 32
    cope = CoPE(H * D, H, npos=npos, alibi=alibi).to(CUDA)
    if not alibi:
        with torch.no_grad():
            cope.pos_emb.normal_()
    q, k, v = (torch.randn(B, H, T, D, device=CUDA, requires_grad=True) for _ in range(3))
    scale = 1 / math.sqrt(D)
    monkeypatch.setenv("SYNTHLAB_COPE_TRITON", "1")
    from synthlab.model.native.cope import triton_applies

    assert triton_applies(q, npos, not alibi)
    y = cope.attend(q, q, k, v, None, torch.ones(T, T, dtype=torch.bool, device=CUDA).triu(1), scale)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (q, k, v), g)
    ref_cope = CoPE(H * D, H, npos=npos, alibi=alibi).to(CUDA).double()
    ref_cope.load_state_dict(cope.state_dict())
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = _cope_reference(q64, q64, k64, v64, ref_cope, scale)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), g.double())
    # TF32 is off by default for float32 matmuls; the kernels compute in float32
    assert (y.double() - ref).abs().max() < 1e-3
    for a, b in zip(grads, ref_grads):
        assert (a.double() - b).abs().max() < 1e-2 * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("T, k, causal", [(64, 3, True), (200, 3, True), (130, 1, True), (72, 3, False)])
def test_triton_dape_matches_the_pytorch_path_on_the_gpu(T, k, causal, monkeypatch):
    """softmax(A) and the gradients of S, the bias and the weights, against the PyTorch path in
    float64 on the device (the kernels compute in float32 with FMAs, no TF32)."""
    pytest.importorskip("triton", reason="triton is not installed (pip install 'synthlab-pe[gpu]'; Linux only)")
    from synthlab.model.processors import DAPE

    torch.manual_seed(0)
    B, H = 2, 4
    dape = DAPE(H, with_bias=True, hidden=32, k=k, causal=causal).to(CUDA)
    S = torch.randn(B, H, T, T, device=CUDA, requires_grad=True)
    bias = torch.randn(1, H, T, T, device=CUDA, requires_grad=True)
    future = torch.ones(T, T, dtype=torch.bool, device=CUDA).triu(1)
    monkeypatch.setenv("SYNTHLAB_DAPE_TRITON", "1")
    from synthlab.model.native.dape import triton_applies

    assert triton_applies(S, dape.conv1.weight, dape.with_bias, causal, softmax=True)
    P = dape.attention(S, bias, future if causal else None)
    g = torch.randn_like(P)
    grads = torch.autograd.grad(P, (S, bias, *dape.parameters()), g)
    monkeypatch.setenv("SYNTHLAB_DAPE_TRITON", "0")
    ref_dape = DAPE(H, with_bias=True, hidden=32, k=k, causal=causal).to(CUDA).double()
    ref_dape.load_state_dict(dape.state_dict())
    S64, bias64 = (t.detach().double().requires_grad_() for t in (S, bias))
    ref = ref_dape.attention(S64, bias64, future if causal else None)
    ref_grads = torch.autograd.grad(ref, (S64, bias64, *ref_dape.parameters()), g.double())
    assert (P.double() - ref).abs().max() < 1e-4
    for a, b in zip(grads, ref_grads):
        assert (a.double() - b).abs().max() < 1e-3 * max(1.0, b.abs().max().item())


def test_a_bf16_run_on_the_gpu(tmp_path):
    import synthlab

    for pe in ("rope", "cope", "kerple+dape:k=3"):
        rec = synthlab.train("flipflop", pe, preset="smoke", overrides={"train.precision": "bf16-mixed"})
        assert rec["status"] == "ok" and rec["device"] == "cuda", pe


def test_compile_on_the_gpu():
    import synthlab

    rec = synthlab.train("flipflop", "rope", preset="smoke", overrides={"train.compile": True, "steps": 20})
    assert rec["status"] == "ok" and rec["device"] == "cuda"


DETERMINISTIC_TWICE = """
import json, warnings
warnings.filterwarnings("error", message="train.deterministic")  # set too late: fail, not warn
import synthlab
ov = {"train.deterministic": True, "steps": 200}
out = {}
for pe in ("rope", "cope"):
    a = synthlab.train("flipflop", pe, preset="quick", overrides=ov)
    b = synthlab.train("flipflop", pe, preset="quick", overrides=ov)
    out[pe] = [a["device"], a["metrics"], b["metrics"]]
print(json.dumps(out))
"""


def test_two_deterministic_gpu_runs_of_one_seed_agree():
    # train.deterministic: cuBLAS's fixed workspace and deterministic algorithms only. torch
    # reads the workspace setting once, at the process's first GPU matmul, so the check runs in a
    # fresh process *without* CUBLAS_WORKSPACE_CONFIG: the run itself must set it in time
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    proc = subprocess.run(
        [sys.executable, "-c", DETERMINISTIC_TWICE], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for pe, (device, a, b) in json.loads(proc.stdout.strip().splitlines()[-1]).items():
        assert device == "cuda" and a == b, pe


def test_batched_seeds_on_the_gpu_equal_separate_runs():
    import synthlab
    from synthlab.run.seedbatch import train_seeds

    ov = {"steps": 30}
    for pe in ("rope", "cope", "kerple+dape:k=3"):
        recs = train_seeds("flipflop", pe, [0, 1, 2], preset="smoke", overrides=ov)
        for seed, rec in zip([0, 1, 2], recs):
            alone = synthlab.train("flipflop", pe, preset="smoke", seed=seed, overrides=ov)
            assert rec["status"] == "ok" and rec["device"] == "cuda"
            for split, m in alone["metrics"].items():
                assert rec["metrics"][split]["token_acc"] == pytest.approx(m["token_acc"], abs=0.03), (pe, seed, split)


def test_training_steps_between_checks_never_wait_for_the_gpu(monkeypatch):
    # torch's sync debug mode raises at any call that makes the host wait for the device
    # (.item(), a blocking copy, nonzero, ...): armed for the steps that do not check the loss
    # for a NaN (every 16th), a run without a logger or a report hook (synthlab.train's default;
    # those read the loss at their steps) passes only if those steps run ahead
    import lightning as L

    import synthlab
    import synthlab.run.pipeline as pipeline

    class Watch(L.Callback):
        armed: list[int] = []
        setup: list[tuple[bool, bool]] = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            step = trainer.global_step
            assert pl_module.report is None and pl_module.logger is None
            if step % 16:
                Watch.armed.append(step)
                torch.cuda.set_sync_debug_mode("error")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            torch.cuda.set_sync_debug_mode("default")

        def on_train_start(self, trainer, pl_module):
            Watch.setup.append(
                (
                    bool(getattr(trainer.train_dataloader, "pin_memory", False)),  # pinned batches
                    bool(trainer.optimizers[0].defaults.get("fused")),
                )
            )  # fused AdamW

    fit = pipeline.fit
    monkeypatch.setattr(pipeline, "fit", lambda *a, callbacks=(), **k: fit(*a, callbacks=[*callbacks, Watch()], **k))
    try:
        for pe in ("rope", "cope", "alibi", "fire", "learned", "kerple+dape:k=3"):
            rec = synthlab.train("flipflop", pe, preset="smoke", overrides={"steps": 40})
            assert rec["status"] == "ok", (pe, rec.get("error"))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(Watch.armed) > 6 * 30 and Watch.setup == [(True, True)] * 6


@pytest.mark.parametrize("pe", ["alibi", "t5", "kerple", "fire", "alibi+t5"])
def test_flex_attention_biases_match_the_float_mask_on_the_gpu(pe, monkeypatch):
    from synthlab.model import build_model, flex

    torch.manual_seed(0)
    model = build_model(pe=pe, vocab_size=11, d_model=64, n_layers=2, n_heads=4, max_len=512).to(CUDA).train()
    tokens = torch.randint(0, 11, (4, 300), device=CUDA)
    calls = []
    attend = flex.attend
    monkeypatch.setattr(flex, "attend", lambda *a, **k: calls.append(1) or attend(*a, **k))

    def run(on: bool):
        monkeypatch.setenv("SYNTHLAB_FLEX_ATTENTION", "1" if on else "0")
        model.zero_grad()
        out = model(tokens)
        out.float().square().mean().backward()
        return out.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}

    got, g_got = run(True)  # float32 matmuls at torch's default "highest" precision on both paths
    assert len(calls) == 2
    want, g_want = run(False)
    assert (got - want).abs().max() < 1e-4 * max(1.0, want.abs().max().item())
    assert g_got.keys() == g_want.keys()
    for n in g_want:  # the bias parameters' gradients come back through flex's captured tensors
        assert (g_got[n] - g_want[n]).abs().max() < 1e-3 * max(1e-3, g_want[n].abs().max().item()), n
