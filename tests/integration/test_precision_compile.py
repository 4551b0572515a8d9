"""``train.precision`` (bf16 autocast) and ``train.compile`` (torch.compile): what each
changes, that the defaults change nothing (results, checkpoint keys), and bad values."""

import math

import pytest
import torch

from synthlab.cli import main
from synthlab.model.encoders.contextual import CoPE
from synthlab.run.checkpoints import run_key
from synthlab.run.training import resolve_config, train


@pytest.fixture
def linear_dtypes():
    """(training?, output dtype) of every nn.Linear call while the fixture is active."""
    seen = set()

    def hook(module, args, out):
        if isinstance(module, torch.nn.Linear) and torch.is_tensor(out):
            seen.add((module.training, out.dtype))

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    yield seen
    handle.remove()


@pytest.mark.parametrize("pe", ["rope", "cope", "kerple+dape"])
def test_bf16_mixed_trains_and_evaluates_under_autocast(pe, linear_dtypes):
    rec = train("flipflop", pe, preset="smoke", overrides={"train.precision": "bf16-mixed", "steps": 12})
    assert rec["status"] == "ok" and rec["train"]["precision"] == "bf16-mixed"
    assert linear_dtypes == {(True, torch.bfloat16), (False, torch.bfloat16)}  # training and evaluation
    assert all(math.isfinite(v) for m in rec["metrics"].values() for v in m.values())


def test_fp32_default_has_no_autocast(linear_dtypes):
    rec = train("flipflop", "cope", preset="smoke", overrides={"steps": 3})
    assert rec["train"]["precision"] == "fp32"
    assert linear_dtypes == {(True, torch.float32), (False, torch.float32)}


def test_cope_positions_stay_float32_under_bf16_autocast():
    # a bfloat16 running sum of ~100 gates is only good to 0.5 positions: the term must not be
    # computed from bfloat16 positions (PyTorch path; the native CPU kernels take float32 only)
    torch.manual_seed(0)
    B, H, T, D = 1, 2, 120, 16
    cope = CoPE(H * D, H, npos=128)
    with torch.no_grad():
        cope.pos_emb.copy_(torch.randn_like(cope.pos_emb))
    q = torch.randn(B, H, T, D) * 0.1
    S = (q @ torch.randn(B, H, T, D).transpose(-2, -1)) * 0.1  # gates near 1/2: positions up to ~60
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    with torch.no_grad():
        exact = _term_float64(cope, q, S, future)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = cope.forward(q.bfloat16(), S.bfloat16(), None, future)
    assert got.dtype == torch.float32
    # inputs rounded to bfloat16 move the term by ~1e-2; bfloat16 positions would move it by ~1
    assert (got - exact).abs().max() < 0.05, (got - exact).abs().max()


def _term_float64(cope, q, S, future):
    q64, S64 = q.bfloat16().double(), S.bfloat16().double()  # the same rounded inputs, exact arithmetic
    gates = torch.sigmoid(S64).masked_fill(future, 0.0)
    p = cope.positions(gates).clamp(0.0, cope.npos - 1)
    table = q64 @ cope.pos_emb.double()
    table = torch.cat([table, table[..., -1:]], dim=-1)
    lo = p.long()
    low, high = torch.gather(table, -1, lo), torch.gather(table, -1, lo + 1)
    return low + (p - lo) * (high - low)


def test_defaults_keep_checkpoint_keys():
    # a run killed before train.precision / train.compile existed resumes from its checkpoint
    cfg = resolve_config("flipflop", "rope", "smoke")
    key = run_key(cfg)
    cfg.train.compile = True
    assert run_key(cfg) == key  # compile: the same computation
    cfg.train.precision = "bf16-mixed"
    assert run_key(cfg) != key


def test_bad_precision_is_refused_before_writing(tmp_path, capsys):
    with pytest.raises(ValueError, match="train.precision must be one of fp32, bf16-mixed"):
        resolve_config("flipflop", "rope", "smoke", {"train.precision": "fp16"})
    out = tmp_path / "runs"
    assert (
        main(["train", "flipflop", "--pe", "rope", "--preset", "smoke", "--out", str(out), "--set", "precision=half"])
        == 2
    )
    assert "train.precision" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_compile_trains_the_same_model(tmp_path):
    # torch.compile changes the schedule of the computation, not what it computes: same seed,
    # the same metrics within float rounding; the saved weights keep the model's own names
    from safetensors.torch import load_file

    plain = train("flipflop", "rope", preset="smoke", overrides={"steps": 20}, out=tmp_path / "a")
    comp = train("flipflop", "rope", preset="smoke", overrides={"steps": 20, "train.compile": True}, out=tmp_path / "b")
    assert comp["status"] == "ok" and comp["train"]["compile"] is True
    for split, m in plain["metrics"].items():
        assert comp["metrics"][split]["token_acc"] == pytest.approx(m["token_acc"], abs=0.02)
    wa = load_file(tmp_path / "a" / plain["run_id"] / "model.safetensors")
    wb = load_file(tmp_path / "b" / comp["run_id"] / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-4), k


def test_compile_mode_goes_to_torch_compile_and_the_record(monkeypatch):
    # reduce-overhead (CUDA graphs) only pays on a GPU; here: the mode reaches torch.compile
    # (stubbed: the compilation itself is the slow test above) and the record says it
    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, mode=None, **kw: modes.append(mode) or model)
    rec = train(
        "flipflop",
        "rope",
        preset="smoke",
        overrides={"steps": 3, "train.compile": True, "train.compile_mode": "reduce-overhead"},
    )
    assert rec["status"] == "ok" and modes == ["reduce-overhead"]
    assert rec["train"]["compile"] is True and rec["train"]["compile_mode"] == "reduce-overhead"
    assert train("flipflop", "rope", preset="smoke", overrides={"steps": 3})["train"]["compile_mode"] == "default"
    assert modes == ["reduce-overhead"]  # not compiled without train.compile


def test_a_compile_mode_without_compile_or_unknown_exits_2(tmp_path, capsys):
    out = tmp_path / "runs"
    for bad in (
        ["--set", "train.compile_mode=reduce-overhead"],
        ["--set", "train.compile=true", "--set", "train.compile_mode=fast"],
    ):
        assert main(["train", "flipflop", "--pe", "rope", "--preset", "smoke", "--out", str(out), *bad]) == 2
        err = capsys.readouterr().err
        assert "train.compile" in err and len(err.strip().splitlines()) == 1 and not out.exists()
