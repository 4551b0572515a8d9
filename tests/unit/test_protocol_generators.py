"""Protocol of the generators against their references ("Trustworthy results").

- MQAR follows Zoology (zoology/data/multiquery_ar.py, ``multiquery_ar``): a queried value is a
  label only; the input slot after a query key is the empty token, so a model cannot read an
  answer off the input nor eliminate values already shown.
- Arithmetic follows Feng et al. 2023 (guyuntian/CoT_benchmark, arithmetic/data.py): ``test``
  has exactly n_ops operators; the training mix is evaluated on ``test-mix`` with answer
  accuracy per operator count.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from synthlab import generators
from synthlab.run.data import eval_sets
from synthlab.run.evaluation import EvalContext, answer_acc_by_ops, evaluate
from synthlab.run.records import to_json

MQAR = dict(vocab_size=64, length=48, n_kv=6, ood_lengths="64,96")


def _mqar_samples(task, n=60, seed=4):
    """(split, samples) for every split and group of an MQAR task."""
    out = []
    for split in task.splits:
        for g in task.eval_groups(split) or [{}]:
            out.append((split, g, task.sample(split, n, seed=seed, **g)))
    return out


# -- MQAR ---------------------------------------------------------------------------------
def test_mqar_answer_slot_is_empty_and_values_never_repeat_in_the_input():
    task = generators.get_task("mqar", **MQAR)
    half = task.params["vocab_size"] // 2
    for split, g, samples in _mqar_samples(task):
        for s in samples:
            n = s.params["n_kv"]
            context = dict(zip(s.ids[0 : 2 * n : 2].tolist(), s.ids[1 : 2 * n : 2].tolist()))
            # the logits at a query key predict that key's value from the context
            assert [context[k] for k in s.ids[s.scored].tolist()] == s.target_ids.tolist()
            assert (s.ids[s.scored + 1] == 0).all(), (split, g)  # the empty token, Zoology's 0
            assert not (s.ids[2 * n :] >= half).any()  # no value anywhere in the query region
            for p, y in zip(s.scored, s.target_ids):  # the target is never an input after its key
                assert y not in s.ids[p + 1 :]
            assert task.solve(s) == s.targets


def _elimination_accuracy(samples) -> float:
    """Expected accuracy of guessing uniformly among the context's values not yet seen in the
    query region (a recall-free strategy: H_n / n when every answer is shown after its key)."""
    accs = []
    for s in samples:
        n = s.params["n_kv"]
        values = set(s.ids[1 : 2 * n : 2].tolist())
        for p, y in zip(s.scored, s.target_ids):
            cand = values - set(s.ids[2 * n : p + 1].tolist())
            accs.append(1.0 / len(cand) if y in cand else 0.0)
    return float(np.mean(accs))


def test_mqar_value_elimination_is_chance():
    task = generators.get_task("mqar", **MQAR)
    n = task.params["n_kv"]
    samples = task.sample("test", 100, seed=2)
    # nothing is eliminated: every query leaves all n values open (1/n); the old layout gave H_n/n
    assert _elimination_accuracy(samples) == pytest.approx(1 / n)
    harmonic = sum(1 / k for k in range(1, n + 1)) / n
    assert _elimination_accuracy(samples) < harmonic - 0.1


def test_mqar_ood_length_groups():
    task = generators.get_task("mqar", **MQAR)
    groups = task.eval_groups("ood-length")
    assert groups == [{"length": 64, "n_kv": 8}, {"length": 96, "n_kv": 12}]
    for g in groups:
        for s in task.sample("ood-length", 20, seed=1, **g):
            assert len(s) == g["length"] and len(s.scored) == g["n_kv"]
            assert (s.ids[s.scored + 1] == 0).all()
            assert task.solve(s) == s.targets
    assert "ood-length" in eval_sets(task, 0, 2)


# -- arithmetic ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params", [dict(n_ops=2, ood_ops_max=4), dict(n_ops=4, ood_ops_max=6), dict(n_ops=5, min_ops=3, ood_ops_max=0)]
)
def test_arithmetic_test_split_has_exactly_n_ops(params):
    task = generators.get_task("arithmetic", **params)
    k = params["n_ops"]
    for s in task.sample("test", 150, seed=7):
        assert task.op_count(s) == k and s.tokens.count("=") == k  # one chain step per operator
        assert task.solve(s) == s.targets


def test_arithmetic_test_mix_is_the_training_mix_held_out():
    task = generators.get_task("arithmetic", n_ops=3, ood_ops_max=4)
    assert task.splits == ("train", "test", "test-mix", "ood-ops-4")
    assert task.op_counts("test-mix") == (1, 2, 3) and task.op_counts("test") == ()
    mix = task.sample("test-mix", 600, seed=1)
    counts = np.bincount([task.op_count(s) for s in mix], minlength=4)[1:] / len(mix)
    # uniform over 1..n_ops, as train (sd 0.019); the prompt-hash rejection alone gives 1 op ~0.23
    assert np.all(np.abs(counts - 1 / 3) < 0.05)
    train = {tuple(s.ids[: task.prompt_length(s)].tolist()) for s in task.sample("train", 2000, seed=1)}
    held = {tuple(s.ids[: task.prompt_length(s)].tolist()) for s in mix}
    assert not train & held
    # one operator count only: test-mix would repeat test, so there is none
    assert "test-mix" not in generators.get_task("arithmetic", n_ops=3, min_ops=3, ood_ops_max=0).splits


def test_counting_held_out_splits_keep_the_statement_count_law():
    """The hash rejection must not redraw the statement count: a few short programs carry
    most of a short count's mass, so a count whose frequent program hashes into the held-out
    bucket would be over-represented in test (4 statements: 28 % of test instead of 1/10)."""
    task = generators.get_task("counting", max_steps=12, n_vars=1)
    for split in ("test", "ood-short"):
        counts = np.bincount([s.tokens.count(";") for s in task.sample(split, 240, seed=0)], minlength=13)[3:]
        share = counts / counts.sum()  # U{3..12}: 0.1 each (sd 0.019) where held-out programs exist
        assert share.max() < 0.18, (split, share.round(3))


def test_answer_acc_by_ops_groups_by_operator_count():
    task = generators.get_task("arithmetic", n_ops=3, ood_ops_max=0)
    samples = task.sample("test-mix", 60, seed=3)
    ops = np.array([task.op_count(s) for s in samples])
    right = ops != 2  # every 2-operator answer wrong
    got = answer_acc_by_ops(task, "test-mix", samples, right)
    assert got == {"answer_acc_ops_1": 1.0, "answer_acc_ops_2": 0.0, "answer_acc_ops_3": 1.0}
    assert answer_acc_by_ops(task, "test", samples, right) == {}
    only_1 = [s for s in samples if task.op_count(s) == 1]
    got = answer_acc_by_ops(task, "test-mix", only_1, np.ones(len(only_1), dtype=bool))
    assert got["answer_acc_ops_1"] == 1.0 and np.isnan(got["answer_acc_ops_3"])
    assert json.loads(to_json(got))["answer_acc_ops_3"] is None  # records stay JSON-clean


class _Oracle(torch.nn.Module):
    """Predicts the true next token of any prefix of the given samples; the final answer is
    wrong (off by one) for chains with ``wrong_ops`` operators."""

    def __init__(self, task, samples, wrong_ops):
        super().__init__()
        self.next, self.V = {}, len(task.vocab) + 1
        m = task.params["modulus"]
        for s in samples:
            ids = s.ids.tolist()
            for t in range(1, len(ids)):
                nxt = ids[t]
                if t == len(ids) - 2 and task.op_count(s) == wrong_ops:
                    nxt = (nxt + 1) % m
                self.next[tuple(ids[:t])] = nxt
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids, positions=None):
        B, T = ids.shape
        out = torch.zeros(B, T, self.V)  # (B, T, V)
        for b in range(B):
            row = ids[b].tolist()
            for t in range(T):
                out[b, t, self.next.get(tuple(row[: t + 1]), 0)] = 1.0
        return out


def test_evaluate_reports_answer_accuracy_per_operator_count():
    task = generators.get_task("arithmetic", n_ops=2, ood_ops_max=0)
    sets = eval_sets(task, seed=0, n=8)
    assert set(sets) == {"test", "test-mix"}
    samples = [s for parts in sets.values() for _, _, ss in parts for s in ss]
    ctx = EvalContext(task=task, pad_id=len(task.vocab), batch_size=4, device=torch.device("cpu"))
    metrics, _ = evaluate(_Oracle(task, samples, wrong_ops=2), sets, ctx)
    assert metrics["test"]["answer_acc"] == 0.0  # every test chain has exactly 2 operators
    assert not any(k.startswith("answer_acc_ops_") for k in metrics["test"])
    mix = metrics["test-mix"]
    assert mix["answer_acc_ops_1"] == 1.0 and mix["answer_acc_ops_2"] == 0.0
    n1 = sum(task.op_count(s) == 1 for s in sets["test-mix"][0][2])
    assert mix["answer_acc"] == pytest.approx(n1 / 8)
