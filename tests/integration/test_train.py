"""`synthlab train` / synthlab.run.training: smoke runs for every task, determinism, failure
records, validation before writing, evaluation details (greedy decoding, rope scaling)."""

import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from synthlab import generators
from synthlab.cli import main
from synthlab.generators import che
from synthlab.model.registry import PE_REVISION
from synthlab.run.data import eval_sets
from synthlab.run.evaluation import EvalContext, evaluate, greedy_right, score_samples
from synthlab.run.modules import lr_factor
from synthlab.run.training import resolve_config, train

CHE_TASKS = tuple(che.TASKS)
RECORD_KEYS = {
    "schema",
    "run_id",
    "task",
    "task_params",
    "pe",
    "pe_params",
    "positions",
    "model",
    "train",
    "metrics",
    "by_length",
    "wall_s",
    "device",
    "synthlab",
    "git",
    "study",
    "trial",
    "status",
}
MACHINE_KEYS = {"cpu", "arch", "isa", "torch", "python", "lightning", "numpy", "optuna"}


def _no_nan(x):
    if isinstance(x, float):
        assert math.isfinite(x)
    elif isinstance(x, dict):
        for v in x.values():
            _no_nan(v)
    elif isinstance(x, list):
        for v in x:
            _no_nan(v)


# one encoding per task, varied so the smoke runs cover several encoder families
_PE = {
    "flipflop": "rope",
    "selective_copy": "alibi",
    "counting": "nope",
    "arithmetic": "bipe-rope",
    "binfa": "bipe-alibi",
    "nfa": "sinusoidal",
    "mqar": "nope+dape",
    "passkey": "rope",
}


@pytest.mark.parametrize("name", sorted(generators.TASKS))
def test_smoke_every_task(name, tmp_path):
    pe = _PE[name] if name in _PE else ("rope" if CHE_TASKS.index(name) % 2 else "nope")
    rec = train(name, pe, preset="smoke", out=tmp_path)
    assert rec["status"] == "ok", rec.get("error")
    assert RECORD_KEYS <= set(rec)
    assert MACHINE_KEYS <= set(rec["machine"]) and "gpu" not in rec["machine"]  # trained on the CPU
    task = generators.get_task(name, **{k: v for k, v in rec["task_params"].items() if v is not None})
    assert set(rec["metrics"]) == set(task.splits) - {"train"}
    for split, m in rec["metrics"].items():
        for key in ("token_acc", "seq_acc", *task.metrics):
            assert key in m and 0.0 <= m[key] <= 1.0, (split, key)
    if name in CHE_TASKS:  # per-length score; the ood headline is the mean over lengths
        ood = {k: v for k, v in rec["by_length"].items() if not k.startswith("test/")}
        ood = {k.split("/")[-1]: v for k, v in ood.items()}
        assert sorted(ood, key=int) == ["6", "7", "8"]
        assert rec["metrics"]["ood"]["length_mean_acc"] == pytest.approx(np.mean(list(ood.values())))
    if name == "arithmetic":
        assert "answer_acc" in rec["metrics"]["test"]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["run_id"] == rec["run_id"]
    run_dir = tmp_path / rec["run_id"]
    assert {p.name for p in run_dir.iterdir()} == {"config.json", "metrics.jsonl", "model.safetensors", "logs"}


def test_same_seed_same_metrics_and_other_seed_differs():
    a = train("flipflop", "rope", preset="smoke", seed=1)
    b = train("flipflop", "rope", preset="smoke", seed=1)
    c = train("flipflop", "rope", preset="smoke", seed=2)
    assert a["metrics"] == b["metrics"]
    assert a["metrics"] != c["metrics"]
    assert a["run_id"] != b["run_id"]


def test_same_seed_same_metrics_at_two_threads():
    a = train("flipflop", "rope", preset="smoke", seed=1, overrides={"train.threads": 2})
    b = train("flipflop", "rope", preset="smoke", seed=1, overrides={"train.threads": 2})
    assert a["metrics"] == b["metrics"] and a["train"]["threads"] == 2


def test_strict_determinism_switch_is_scoped_to_the_run(monkeypatch):
    import torch

    from synthlab.run import pipeline

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seen = {}

    def fake_fit(module, dm, cfg, progress=False, desc=""):
        seen.update(
            on=torch.are_deterministic_algorithms_enabled(),
            warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            cublas=os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            cudnn=torch.backends.cudnn.deterministic,
        )
        return {"device": "cpu", "root_device": torch.device("cpu"), "steps_done": 0}

    monkeypatch.setattr(pipeline, "fit", fake_fit)
    before = torch.are_deterministic_algorithms_enabled()
    rec = train("flipflop", "rope", preset="smoke", overrides={"train.deterministic": "true"})
    assert seen == {"on": True, "warn_only": False, "cublas": ":4096:8", "cudnn": True}
    assert rec["train"]["deterministic"] is True
    assert torch.are_deterministic_algorithms_enabled() == before and not torch.backends.cudnn.deterministic
    train("flipflop", "rope", preset="smoke")
    assert seen["on"] and seen["warn_only"]  # the default: warn only


def test_record_fields(tmp_path):
    rec = train(
        "flipflop",
        "ROPE",
        preset="smoke",
        out=tmp_path,
        study="s",
        trial=3,
        overrides={"d_model": 16, "task.n_pairs": 8},
        steps=5,
    )
    assert rec["pe"] == "rope" and rec["pe_params"] == {"rope": {"base": 10000.0}}
    assert rec["model"]["d_model"] == 16 and rec["model"]["params"] > 0
    # the thread count is recorded: CPU results repeat exactly for the same seed and thread count
    assert rec["train"] == {
        "steps": 5,
        "batch_size": 16,
        "lr": 3e-3,
        "seed": 0,
        "train_len": 16,
        "threads": 1,
        "warmup": 2,
        "schedule": "linear",
        "weight_decay": 0.1,
        "grad_clip": 1.0,
        "n_train": None,
        "eval_samples": 32,
        "deterministic": False,
        "precision": "fp32",
        "compile": False,
        "compile_mode": "default",
    }
    assert (rec["model"]["dropout"], rec["model"]["causal"], rec["model"]["tie_embeddings"]) == (0.0, True, False)
    assert rec["task_params"]["n_pairs"] == 8
    assert (rec["study"], rec["trial"], rec["schema"], rec["device"]) == ("s", 3, 1, "cpu")
    # the generator's and the encodings' revisions: grids never average runs of two
    assert (rec["task_revision"], rec["pe_revision"]) == (generators.TASKS["flipflop"].REVISION, PE_REVISION)
    cfg = json.loads((tmp_path / rec["run_id"] / "config.json").read_text())
    assert cfg["model"]["d_model"] == 16 and cfg["train"]["steps"] == 5
    metrics = [json.loads(ln) for ln in (tmp_path / rec["run_id"] / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in m for m in metrics) and any(m.get("split") == "test" for m in metrics)


def test_no_files_without_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train("flipflop", "nope", preset="smoke", steps=3)
    assert list(tmp_path.iterdir()) == []


def test_diverging_run_is_recorded_failed(tmp_path, monkeypatch):
    import synthlab.run.modules as tr

    real = tr.F.cross_entropy
    calls = {"n": 0}

    def poisoned(*a, **k):
        calls["n"] += 1
        out = real(*a, **k)
        return out * float("nan") if calls["n"] >= 4 else out

    monkeypatch.setattr(tr.F, "cross_entropy", poisoned)
    rec = train("flipflop", "rope", preset="smoke", out=tmp_path)
    assert rec["status"] == "failed" and "non-finite training loss" in rec["error"]
    assert rec["train"]["steps_done"] < 20
    line = (tmp_path / "results.jsonl").read_text()
    assert "NaN" not in line and "Infinity" not in line
    saved = json.loads(line)
    assert saved["status"] == "failed" and saved["error"] == rec["error"]
    _no_nan(saved)
    assert not (tmp_path / rec["run_id"] / "model.safetensors").exists()


def test_huge_lr_fails_cleanly_or_is_finite(tmp_path):
    rec = train("flipflop", "rope", preset="smoke", out=tmp_path, overrides={"lr": 1e6, "grad_clip": 0})
    saved = json.loads((tmp_path / "results.jsonl").read_text())
    _no_nan(saved)
    if rec["status"] == "failed":
        assert rec["error"].startswith("diverged")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"overrides": {"d_modl": 3}}, "unknown setting 'd_modl'"),
        ({"overrides": {"d_model": "x"}}, "model.d_model: expected an integer"),
        ({"overrides": {"lr": -1}}, "train.lr must be > 0"),
        ({"overrides": {"task.n_pairs": 1}}, "n_pairs"),
        ({"overrides": {"task.p_i": 2}}, "p_i"),
        ({"pe": "ropey"}, "unknown pe component 'ropey'"),
        ({"task": "flipflap"}, "unknown task 'flipflap'"),
        ({"preset": "huge"}, "preset 'huge'"),
        ({"positions": "pose:chunks=2,target=64", "pe": "nope"}, "needs an encoding that reads token indices"),
        ({"positions": "randomized:max=8"}, "must cover the longest evaluated sequence"),
        ({"rope_scaling": "yarn", "pe": "alibi"}, "needs a rotary encoding"),
        ({"positions": "pose:chunks=2,target=16"}, "training sequences \\(32 tokens\\) are longer"),
        ({"overrides": {"causal": False}}, "causal=false"),
        ({"overrides": {"max_len": 8}, "pe": "learned"}, "max_len=8"),
    ],
)
def test_bad_input_raises_before_writing(tmp_path, kwargs, match):
    args = {"task": "flipflop", "pe": "rope", "preset": "smoke", **kwargs}
    out = tmp_path / "runs"
    with pytest.raises(ValueError, match=match):
        train(args.pop("task"), args.pop("pe"), out=out, **args)
    assert not out.exists()


def test_resolve_config_validates_without_running():
    cfg = resolve_config("parity_check", "kerple+dape:k=3", "smoke", {"steps": 7, "n_heads": 4, "d_model": 32})
    assert cfg.train.steps == 7 and cfg.pe == "kerple+dape:k=3" and cfg.model.n_heads == 4
    with pytest.raises(ValueError, match="causal only"):
        resolve_config("parity_check", "cope", "smoke", {"causal": False})


def test_lr_schedule():
    assert lr_factor(0, 100, 10, "linear") == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, "linear") == pytest.approx(1.0)
    assert lr_factor(10, 100, 10, "linear") == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, "linear") == pytest.approx(0.5)
    assert lr_factor(55, 100, 10, "cosine") == pytest.approx(0.5)
    assert lr_factor(100, 100, 10, "cosine") == pytest.approx(0.0)
    assert lr_factor(99, 100, 0, "constant") == 1.0


class _Oracle(torch.nn.Module):
    """Predicts the true next token of any prefix of the given samples (or a wrong answer)."""

    def __init__(self, samples, vocab_size, wrong_answer=False):
        super().__init__()
        self.next = {}
        for s in samples:
            ids = [int(i) for i in s.ids]
            for t in range(1, len(ids)):
                nxt = ids[t]
                if wrong_answer and t == len(ids) - 2:
                    nxt = (nxt + 1) % 11  # the answer digit, off by one
                self.next[tuple(ids[:t])] = nxt
        self.V = vocab_size
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids, positions=None):
        B, T = ids.shape
        out = torch.zeros(B, T, self.V)
        for b in range(B):
            row = [int(i) for i in ids[b]]
            for t in range(T):
                out[b, t, self.next.get(tuple(row[: t + 1]), 0)] = 1.0
        return out


def test_greedy_decoding_reads_the_answer_before_eos():
    task = generators.get_task("arithmetic", n_ops=2, ood_ops_max=0)
    samples = task.sample("test", 6, seed=0)
    ctx = EvalContext(task=task, pad_id=len(task.vocab), batch_size=4, device=torch.device("cpu"))
    assert greedy_right(_Oracle(samples, len(task.vocab) + 1), samples, ctx).all()
    assert not greedy_right(_Oracle(samples, len(task.vocab) + 1, wrong_answer=True), samples, ctx).any()


def test_greedy_decoding_budget_is_per_sample_whatever_the_batch():
    """A right but verbose model (it repeats ``= answer`` before ``<eos>``) reaches its
    ``<eos>`` within a sample's own decode_width or not, whoever shares its chunk: answer_acc
    is the same at every eval batch size (it was 0.33 alone, 0.89 in one chunk of 64)."""
    task = generators.get_task("arithmetic", modulus=5, n_ops=4, ood_ops_max=0)
    samples = task.sample("test-mix", 24, seed=0)
    eq, eos = task.token_id("="), task.token_id("<eos>")
    verbose = []
    for s in samples:  # the true chain, then "= x" repeated 0.5 x its length, then <eos>
        ids = [int(i) for i in s.ids[:-1]]
        verbose.append(SimpleNamespace(ids=np.array(ids + [eq, ids[-1]] * (len(s) // 2) + [eos])))
    model = _Oracle(verbose, len(task.vocab) + 1)
    accs = [
        greedy_right(
            model, samples, EvalContext(task=task, pad_id=len(task.vocab), batch_size=bs, device=torch.device("cpu"))
        ).mean()
        for bs in (1, 24)
    ]
    assert accs[0] == accs[1] < 1.0, accs


class _Recorder(torch.nn.Module):
    def __init__(self, V):
        super().__init__()
        self.V, self.calls, self.scale = V, [], None
        self.w = torch.nn.Parameter(torch.zeros(1))

    def set_rope_scaling(self, kind, factor=None, train_len=None):
        self.scale = None if kind is None else (kind, factor)
        self.calls.append(self.scale)

    def forward(self, ids, positions=None):
        self.calls.append(("forward", ids.shape[1], self.scale))
        return torch.zeros(ids.shape[0], ids.shape[1], self.V)


def test_rope_scaling_factor_is_eval_over_train_length():
    task = generators.get_task("parity_check", train_max_length=5, test_min_length=6, test_max_length=8)
    sets = eval_sets(task, seed=0, n=2)
    m = _Recorder(len(task.vocab) + 1)
    train_len = 6  # parity: N inputs + 1 placeholder
    ctx = EvalContext(
        task=task,
        pad_id=len(task.vocab),
        batch_size=8,
        device=torch.device("cpu"),
        rope_scaling="yarn",
        rotary=True,
        train_len=train_len,
    )
    metrics, groups = evaluate(m, sets, ctx)
    fwd = [c for c in m.calls if c and c[0] == "forward"]
    assert [(T, s) for _, T, s in fwd] == [(7, ("yarn", 7 / 6)), (8, ("yarn", 8 / 6)), (9, ("yarn", 9 / 6))]
    assert m.scale is None  # reset after evaluation
    assert set(groups["ood"]) == {"6", "7", "8"}


def test_rope_scaling_factor_is_each_samples_own_in_a_mixed_length_split():
    """A split of mixed lengths (counting) with eval-time rope scaling: every chunk holds one
    length, so no sample is scaled (or padded) by a longer batch-mate's factor and its score
    does not depend on the eval batch size."""
    task = generators.get_task("counting", max_steps=16)
    samples = task.sample("test", 24, seed=0)
    assert len({len(s) for s in samples}) > 3
    m = _Recorder(len(task.vocab) + 1)
    seen = []
    m.forward = lambda ids, positions=None: (seen.append((ids, m.scale)), torch.zeros(*ids.shape, m.V))[1]
    ctx = EvalContext(
        task=task,
        pad_id=len(task.vocab),
        batch_size=8,
        device=torch.device("cpu"),
        rope_scaling="linear",
        rotary=True,
        train_len=10,
    )
    score_samples(m, samples, ctx)
    assert sum(ids.shape[0] for ids, _ in seen) == len(samples)
    for ids, scale in seen:
        assert not (ids == len(task.vocab)).any()  # no padding: one length per chunk
        assert scale == ("linear", ids.shape[1] / 10)


class _ScaledOracle(_Oracle):
    """The oracle, right only where it is scaled at the row's own length (its non-pad tokens)
    over train_len: a model whose answers depend on the rope factor it is given."""

    def __init__(self, samples, vocab_size, pad_id, train_len):
        super().__init__(samples, vocab_size)
        self.pad_id, self.train_len, self.scale = pad_id, train_len, None

    def set_rope_scaling(self, kind, factor=None, train_len=None):
        self.scale = None if kind is None else factor

    def forward(self, ids, positions=None):
        out = super().forward(ids)  # (B, T, V)
        for b in range(ids.shape[0]):
            own = int((ids[b] != self.pad_id).sum())
            if own > self.train_len and self.scale != own / self.train_len:
                out[b] = 0.0
                out[b, :, 0] = 1.0  # scaled at another row's length: a wrong token
        return out


def test_greedy_decoding_scales_each_sample_at_its_own_length_whatever_the_batch():
    """Greedy decoding under eval-time rope scaling: each step's factor is the current length
    over train_len. A sample shared its chunk with longer prompts and was scaled at their
    length, so its answer depended on the eval batch size (here: all right alone, 2 of 24 in one
    chunk of 24); rows of one prompt length per chunk advance in step, each at its own length."""
    task = generators.get_task("arithmetic", modulus=5, n_ops=4, ood_ops_max=0)
    samples = task.sample("test-mix", 24, seed=0)
    assert len({task.prompt_length(s) for s in samples}) > 2
    pad = len(task.vocab)
    model = _ScaledOracle(samples, pad + 1, pad, train_len=4)
    accs = [
        greedy_right(
            model,
            samples,
            EvalContext(
                task=task,
                pad_id=pad,
                batch_size=bs,
                device=torch.device("cpu"),
                rope_scaling="linear",
                rotary=True,
                train_len=4,
            ),
        ).mean()
        for bs in (1, 24)
    ]
    assert accs == [1.0, 1.0], accs


def test_cli_train_prints_table_and_appends(tmp_path, capsys):
    out = tmp_path / "runs"
    rc = main(
        [
            "train",
            "flipflop",
            "--pe",
            "rope",
            "--preset",
            "smoke",
            "--set",
            "steps=4",
            "--set",
            "model.d_model=16",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "read_error %" in text and "ood-dense" in text
    rec = json.loads((out / "results.jsonl").read_text())
    assert rec["train"]["steps"] == 4 and rec["model"]["d_model"] == 16


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--set", "d_modl=3"], "unknown setting 'd_modl'"),
        (["--set", "steps=abc"], "train.steps: expected an integer"),
        (["--set", "steps=0"], "train.steps must be >= 1"),
        (["--set", "steps"], "--set expects key=value"),
        (["--pe", "nosuch"], "unknown pe component"),
    ],
)
def test_cli_bad_input_exit_2_nothing_written(tmp_path, capsys, argv, match):
    out = tmp_path / "runs"
    base = ["train", "flipflop", "--preset", "smoke", "--out", str(out), "--quiet"]
    if "--pe" not in argv:
        base += ["--pe", "rope"]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]
    assert not out.exists()


def test_cli_unknown_task_exit_2(tmp_path, capsys):
    assert main(["train", "nosuch", "--pe", "rope", "--out", str(tmp_path / "o")]) == 2
    assert "unknown task 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_positions_and_rope_scaling_run(tmp_path):
    rec = train("parity_check", "rope", preset="smoke", positions="randomized:max=64", steps=5)
    assert rec["status"] == "ok" and rec["positions"] == "randomized:max=64"
    rec = train(
        "parity_check", "rope", preset="smoke", positions="pose:chunks=2,target=32", rope_scaling="linear", steps=5
    )
    assert rec["status"] == "ok" and rec["rope_scaling"] == "linear"


@pytest.mark.slow
def test_flipflop_quick_rope_learns():
    """A real learning check at the quick preset's model and optimizer, shrunk to keep CI
    short (T = 64 instead of 128, 700 steps at lr 2e-3; ~1 min on 2 cores): < 5% in-distribution
    read error (chance: 50%; measured 0.0%)."""
    rec = train(
        "flipflop", "rope", preset="quick", overrides={"n_pairs": 32, "steps": 700, "lr": 2e-3, "eval_samples": 300}
    )
    assert rec["status"] == "ok"
    assert rec["metrics"]["test"]["read_error"] < 0.05, rec["metrics"]


@pytest.mark.slow
def test_parity_nope_stays_near_chance_out_of_distribution():
    """Parity with NoPE does not extrapolate: OOD accuracy near 50% (no OOD leakage)."""
    rec = train(
        "parity_check", "nope", preset="quick", overrides={"steps": 400, "test_max_length": 60, "eval_samples": 16}
    )
    assert rec["status"] == "ok"
    long = [v for k, v in rec["by_length"].items() if k.startswith("ood/") and int(k.split("/")[1]) >= 40]
    assert len(long) > 10
    assert 0.35 < float(np.mean(long)) < 0.65


@pytest.mark.parametrize("pe", ["bipe-alibi", "learned"])
def test_greedy_decoding_past_the_data_fits_the_position_tables(pe, monkeypatch):
    """A model that never writes ``=`` or ``<eos>`` (here: forced to write ``1``) makes
    arithmetic's greedy decoding run to its full budget (1.5x the longest sample), past every
    data length; the learned position tables (BiPE's intra-segment one, learned APE) must cover
    it instead of failing the run."""
    from synthlab.model.transformer import Transformer

    forward = Transformer.forward

    def always_one(self, tokens, *args, **kwargs):
        out = forward(self, tokens, *args, **kwargs)
        logits = out[0] if isinstance(out, tuple) else out
        if not self.training:
            logits[..., 1] += 1e4  # token "1"
        return out

    monkeypatch.setattr(Transformer, "forward", always_one)
    rec = train("arithmetic", pe, preset="smoke", overrides={"steps": 2, "eval_samples": 8})
    assert rec["status"] == "ok", rec.get("error")
    assert rec["metrics"]["test"]["answer_acc"] == 0.0  # never an answer


def test_load_run_reloads_runs_saved_with_the_old_rotary_pair_layout(tmp_path):
    """Runs saved before config.json recorded `rotary_pairs` rotated pairs (k, k + d/2); load_run
    must rebuild them with that layout. A legacy run is made here from a current one by permuting
    its q, k projection rows to the old layout (the same function)."""
    import shutil

    from safetensors.torch import save_model

    import synthlab

    rec = train(
        "flipflop", "rope", preset="smoke", out=tmp_path, overrides={"d_model": 16, "task.n_pairs": 8}, steps=20
    )
    run_dir = tmp_path / rec["run_id"]
    assert json.loads((run_dir / "config.json").read_text())["rotary_pairs"] == "interleaved"
    run = synthlab.load_run(run_dir)
    _, ids = run.batch("test", n=4)
    with torch.no_grad():
        expected = run.model(ids)
    legacy_dir = tmp_path / "legacy"
    shutil.copytree(run_dir, legacy_dir)
    cfg = json.loads((legacy_dir / "config.json").read_text())
    del cfg["rotary_pairs"]
    (legacy_dir / "config.json").write_text(json.dumps(cfg))
    C, H = cfg["model"]["d_model"], cfg["model"]["n_heads"]
    D = C // H
    # interleaved dim j holds half-layout dim j // 2 + (j % 2) * D / 2; q and k rows of each head, v as is
    to_half = torch.argsort(torch.tensor([j // 2 + (j % 2) * (D // 2) for j in range(D)]))
    rows = torch.cat([part * C + h * D + to_half for part in (0, 1) for h in range(H)] + [torch.arange(2 * C, 3 * C)])
    model = run.model
    with torch.no_grad():
        for block in [m for m in model.modules() if hasattr(m, "c_attn")]:
            block.c_attn.weight.copy_(block.c_attn.weight[rows])
            block.c_attn.bias.copy_(block.c_attn.bias[rows])
    save_model(model, str(legacy_dir / "model.safetensors"))
    legacy = synthlab.load_run(legacy_dir)
    with torch.no_grad():
        assert torch.allclose(legacy.model(ids), expected, atol=1e-5)
    cfg["rotary_pairs"] = "interleaved"  # read with the wrong layout, the weights give another function
    (legacy_dir / "config.json").write_text(json.dumps(cfg))
    with torch.no_grad():
        assert not torch.allclose(synthlab.load_run(legacy_dir).model(ids), expected, atol=1e-3)
    cfg["rotary_pairs"] = "diagonal"
    (legacy_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="rotary_pairs 'diagonal' unknown"):
        synthlab.load_run(legacy_dir)


def test_lightnings_hook_name_skips_nn_modules_setattr(monkeypatch):
    # Lightning sets _current_fx_name ~46 times a step; through nn.Module.__setattr__ that was
    # 0.2 ms of host time a step (fitting.QuickHookName). Other attributes still go through it.
    from synthlab.run.seedbatch import train_seeds

    seen = []
    setattr_ = torch.nn.Module.__setattr__
    monkeypatch.setattr(torch.nn.Module, "__setattr__", lambda self, n, v: seen.append(n) or setattr_(self, n, v))
    rec = train("flipflop", "rope", preset="smoke", overrides={"steps": 5})
    recs = train_seeds("flipflop", "rope", [0, 1], preset="smoke", overrides={"steps": 5})
    assert rec["status"] == "ok" and all(r["status"] == "ok" for r in recs)
    assert "_current_fx_name" not in seen and "last_loss" in seen
    import lightning as L

    from synthlab.run.fitting import HOOK_NAME

    assert HOOK_NAME in vars(L.LightningModule())  # Lightning still sets it under this name


@pytest.mark.parametrize("task", ["arithmetic", "flipflop"])
def test_data_workers_change_nothing_in_a_run(task, tmp_path):
    # train.data_workers (on by default on a GPU): batches built in worker processes are the same
    # batches in the same order, so a CPU run is bit-identical, train_len included
    from safetensors.torch import load_file

    a = train(task, "rope", preset="smoke", overrides={"steps": 12}, out=tmp_path / "a")
    b = train(task, "rope", preset="smoke", overrides={"steps": 12, "train.data_workers": 2}, out=tmp_path / "b")
    assert a["status"] == b["status"] == "ok"
    assert a["metrics"] == b["metrics"] and a["train"]["train_len"] == b["train"]["train_len"]
    wa = load_file(tmp_path / "a" / a["run_id"] / "model.safetensors")
    wb = load_file(tmp_path / "b" / b["run_id"] / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_batched_seeds_with_a_data_worker_equal_in_process():
    from synthlab.run.seedbatch import train_seeds

    a = train_seeds("flipflop", "rope", [0, 1], preset="smoke", overrides={"steps": 8})
    b = train_seeds("flipflop", "rope", [0, 1], preset="smoke", overrides={"steps": 8, "train.data_workers": 1})
    assert [r["metrics"] for r in a] == [r["metrics"] for r in b]


def test_cli_train_prints_heartbeat_lines_to_a_log(tmp_path, capsys):
    """On a stderr that is no terminal (a batch log) `synthlab train` printed nothing
    until it ended (34 minutes under load): now the heartbeat lines a sweep prints."""
    argv = [
        "train",
        "flipflop",
        "--pe",
        "rope",
        "--preset",
        "smoke",
        "--set",
        "steps=20",
        "--out",
        str(tmp_path),
        "--progress-every",
        "0.001",
    ]
    assert main(argv) == 0
    beats = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[train] flipflop rope: step ")]
    assert len(beats) >= 2 and "/20, loss " in beats[0] and beats[-1].endswith("elapsed"), beats
    assert main([*argv, "--quiet"]) == 0
    assert "[train]" not in capsys.readouterr().err
