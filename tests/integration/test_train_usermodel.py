"""A user's own model: ``synthlab.train(..., model=factory)`` trains, evaluates and records a
module of one's own (here an LSTM) like synthlab's Transformer; bad factories are refused
before anything is written; reopening such a run needs the factory."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_model

from synthlab import generators
from synthlab.run.training import train
from synthlab.run.usermodel import saved_model

OV = {"steps": 10, "d_model": 16, "eval_samples": 8}


class TinyLSTM(torch.nn.Module):
    """ids (B, T) -> logits (B, T, V): a causal model without positional encoding."""

    def __init__(self, vocab_size: int, d: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, d)
        self.rnn = torch.nn.LSTM(d, d, batch_first=True)
        self.head = torch.nn.Linear(d, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(ids))[0])


def lstm(cfg, vocab_size: int, max_len: int) -> torch.nn.Module:
    return TinyLSTM(vocab_size, cfg.model.d_model)


NAME = f"{__name__}.lstm"


def test_a_factory_model_is_trained_evaluated_and_recorded(tmp_path):
    rec = train("flipflop", "nope", preset="smoke", out=tmp_path, overrides=OV, model=lstm)
    assert rec["status"] == "ok", rec.get("error")
    n = sum(p.numel() for p in TinyLSTM(len(generators.get_task("flipflop", n_pairs=16).vocab) + 1, 16).parameters())
    assert rec["model"] == {"factory": NAME, "params": n, "dropout": 0.0, "causal": True, "tie_embeddings": False}
    assert set(rec["metrics"]) == {"test", "ood-sparse", "ood-dense"}
    run_dir = tmp_path / rec["run_id"]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model_factory"] == NAME
    again = train("flipflop", "nope", preset="smoke", overrides=OV, model=lstm)  # seeded before the factory
    assert again["metrics"] == rec["metrics"]

    # reopening: the factory rebuilds the module, the saved weights fit it
    task = generators.get_task("flipflop", **config["task_params"])
    module = saved_model(config, task, lstm, where=str(run_dir))
    assert isinstance(module, TinyLSTM)
    load_model(module, str(run_dir / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"trained the model of factory {NAME}: load it with load_run\(dir, model="):
        saved_model(config, task, None, where=str(run_dir))
    # and through load_run, as a notebook reopens a run
    from synthlab.run.runs import load_run

    run = load_run(run_dir, model=lstm)
    assert isinstance(run.model, TinyLSTM) and not run.model.training
    assert torch.equal(run.model.head.weight, module.head.weight)
    with pytest.raises(ValueError, match=r"load it with load_run\(dir, model="):
        load_run(run_dir)


def test_a_transformer_run_needs_no_factory_and_refuses_one(tmp_path):
    rec = train("flipflop", "nope", preset="smoke", out=tmp_path, overrides=OV, logger="none")
    config = json.loads((tmp_path / rec["run_id"] / "config.json").read_text())
    assert "model_factory" not in config and "factory" not in rec["model"]
    task = generators.get_task("flipflop", **config["task_params"])
    assert saved_model(config, task, None) is None
    with pytest.raises(ValueError, match="trained synthlab's Transformer"):
        saved_model(config, task, lstm)


def _returns(value):
    return lambda cfg, vocab_size, max_len: value


@pytest.mark.parametrize(
    "factory,kwargs,match",
    [
        (42, {}, "model must be a factory model\\(cfg, vocab_size, max_len\\) -> torch.nn.Module, got int"),
        (_returns("lstm"), {}, "returned str, not a torch.nn.Module"),
        (_returns(torch.nn.ReLU()), {}, "returned a module without trainable parameters"),
        (lstm, {"positions": "randomized:max=128", "pe": "rope"}, "takes no positions= argument"),
        (lstm, {"rope_scaling": "yarn", "pe": "rope"}, "has no set_rope_scaling method"),
    ],
)
def test_bad_factories_are_refused_before_writing(tmp_path, factory, kwargs, match):
    pe = kwargs.pop("pe", "nope")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        train("flipflop", pe, preset="smoke", out=out, overrides=OV, model=factory, **kwargs)
    assert not out.exists()
