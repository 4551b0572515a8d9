"""``train.deterministic``: cuBLAS's fixed workspace is set before the run's first CUDA call.

torch reads CUBLAS_WORKSPACE_CONFIG once, when it sets up cuBLAS; a value set after that is
ignored without a word. These tests run on CPU: they check *when* the run sets it (before the
memory check, whose ``torch.cuda.mem_get_info`` is a run's first CUDA call on a GPU), that a
user's value is kept, and that a process which had already used CUDA is warned."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import synthlab
from synthlab.run import fitting, pipeline, seedbatch

ENV = "CUBLAS_WORKSPACE_CONFIG"
SMOKE = {"steps": 4, "train.eval_samples": 4}


@pytest.fixture(autouse=True)
def restored_env(monkeypatch):
    # setenv first so that monkeypatch records the variable's state and restores it afterwards:
    # the code under test sets it with os.environ directly, which would leak into later tests
    monkeypatch.setenv(ENV, "recorded")
    monkeypatch.delenv(ENV)


def _env_at_memory_check(monkeypatch) -> list:
    seen: list = []
    real = pipeline.check_run_fits

    def spy(*a, **k):
        seen.append(os.environ.get(ENV))
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "check_run_fits", spy)
    return seen


@pytest.mark.parametrize("strict", [True, False])
def test_train_sets_the_workspace_before_its_memory_check(monkeypatch, strict):
    seen = _env_at_memory_check(monkeypatch)
    rec = synthlab.train("flipflop", "rope", preset="smoke", overrides={**SMOKE, "train.deterministic": strict})
    assert rec["status"] == "ok" and rec["train"]["deterministic"] is strict
    assert seen == [fitting.CUBLAS_WORKSPACE if strict else None]


def test_batched_seeds_set_the_workspace_before_their_memory_check(monkeypatch):
    seen = _env_at_memory_check(monkeypatch)
    recs = seedbatch.train_seeds(
        "flipflop", "rope", [0, 1], preset="smoke", overrides={**SMOKE, "train.deterministic": True}
    )
    assert all(r["status"] == "ok" for r in recs)
    assert seen == [fitting.CUBLAS_WORKSPACE]


def test_a_value_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv(ENV, ":16:8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitting.fix_cublas_workspace(True)
    assert os.environ[ENV] == ":16:8"


def test_a_process_that_already_used_cuda_is_warned(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(RuntimeWarning, match="CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python"):
        fitting.fix_cublas_workspace(True)
    assert os.environ[ENV] == fitting.CUBLAS_WORKSPACE


def test_nothing_is_set_without_the_switch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitting.fix_cublas_workspace(False)
    assert ENV not in os.environ
