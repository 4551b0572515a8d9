"""What a generator's mix lets a shortcut score, and the mixes the references use.

- binfa / nfa: the final label is balanced within every segment count on every split, so a
  rule that reads only the length (the number of ``#``) scores chance (it scored ~56 % when
  the label followed the automaton's acceptance rate at each length).
- arithmetic: ``train_mix`` draws the operator count of train / test-mix with given shares;
  scripts/arithmetic_mix.py computes the shares of the reference's deduplicated 1M training set
  (Feng et al. 2023, guyuntian/CoT_benchmark arithmetic/data.py ``--under``), and the quick and
  paper presets use them.
"""

from __future__ import annotations

import runpy
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from synthlab import generators
from synthlab.generators.base import Sample
from synthlab.plan import presets

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "arithmetic_mix.py"


# -- binfa / nfa: labels balanced per segment count ----------------------------------------
def _by_count(samples) -> dict[int, list[bool]]:
    out: dict[int, list[bool]] = defaultdict(list)
    for s in samples:
        out[s.tokens.count("#")].append(s.tokens[-1] == "Y")
    return out


@pytest.fixture(scope="module", params=["binfa", "nfa"])
def quick_automaton(request):
    """(task, {split: {segment count: [label is Y, ...]}}) at the quick preset's task table."""
    task = generators.get_task(request.param, **presets.preset(request.param, "quick")["task"])
    sizes = {"train": 2400, "test": 2000, "ood-segments": 1600}
    return task, {split: _by_count(task.sample(split, n, seed=5)) for split, n in sizes.items()}


def test_automaton_label_balanced_within_every_segment_count(quick_automaton):
    """P(Y | n_seg) = 1/2 within 4 binomial sd on train, test and ood-segments, for every count
    with >= 50 samples (the old rule gave P(Y | 1 segment) = 0.18 on binfa train, 12 sd off)."""
    task, data = quick_automaton
    for split, by_count in data.items():
        checked = 0
        for n_seg, ys in sorted(by_count.items()):
            if len(ys) < 50:
                continue
            checked += 1
            tol = 4 * np.sqrt(0.25 / len(ys))
            assert abs(np.mean(ys) - 0.5) <= tol, (task.name, split, n_seg, np.mean(ys), len(ys))
        assert checked >= (8 if split != "ood-segments" else 16), (split, checked)


def test_length_only_classifier_scores_chance(quick_automaton):
    """The majority label per '#' count, fitted on train, scores 50 % +- 3 points on test
    (it scored ~56 % on binfa and ~55 % on nfa test before the labels were balanced)."""
    task, data = quick_automaton
    rule = {n: np.mean(ys) > 0.5 for n, ys in data["train"].items()}
    right = [rule.get(n, True) == y for n, ys in data["test"].items() for y in ys]
    assert len(right) == 2000 and abs(np.mean(right) - 0.5) <= 0.03, (task.name, np.mean(right))


@pytest.mark.parametrize("name", ["binfa", "nfa"])
def test_automaton_segment_label_rates_match_simulation(name, monkeypatch):
    """segment_label_rates (the per-count check validate() makes) reads the same labels as the
    per-segment simulation, and an automaton whose rate at some count is below
    MIN_SEGMENT_RATE is rejected with one clear line."""
    from synthlab.generators.binfa import _AutomatonTask

    task = generators.get_task(name, seg_len=5, max_segments=4, ood_max_segments=9)
    rates = task.segment_label_rates(np.random.default_rng(3), 9, 300)
    p = {"seg_min": 9, "seg_max": 9, "seg_len": 5, "n_symbols": task.params["n_symbols"]}
    sym, n_seg = task._draw_strings(np.random.default_rng(3), p, 300)
    assert rates.shape == (9,) and np.array_equal(rates, task._labels(sym, n_seg).mean(axis=0))
    assert np.minimum(rates, 1 - rates).min() >= _AutomatonTask.MIN_SEGMENT_RATE
    monkeypatch.setattr(_AutomatonTask, "MIN_SEGMENT_RATE", 0.5)  # no automaton is balanced at every count
    with pytest.raises(ValueError, match=r"every segment count 1\.\.9") as e:
        generators.get_task(name, seg_len=5, max_segments=4, ood_max_segments=9)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["binfa", "nfa"])
def test_enumerated_and_rejection_paths_share_a_law(name, monkeypatch):
    """Segment counts with few strings are drawn from their enumerated cells, larger ones by
    rejection: the two give one law (here 1 segment of <= 3 symbols over 4: 84 strings)."""
    from synthlab.generators.binfa import _AutomatonTask

    kw = dict(seg_len=3, max_segments=2, ood_max_segments=4)
    law = {}
    for enum_max in (_AutomatonTask.ENUM_MAX, 0):
        monkeypatch.setattr(_AutomatonTask, "ENUM_MAX", enum_max)
        task = generators.get_task(name, **kw)
        samples = task.sample("train", 3000, seed=2, seg_min=1, seg_max=1)
        assert all(task.solve(s) == s.targets for s in samples[:300])
        law[enum_max] = Counter(" ".join(s.tokens) for s in samples)
    a, b = law.values()
    assert 0.5 * sum(abs(a[k] - b[k]) for k in set(a) | set(b)) / 3000 < 0.08
    assert abs(sum(v for k, v in a.items() if k.endswith("Y")) / 3000 - 0.5) < 0.04


@pytest.mark.parametrize("name", ["binfa", "nfa"])
def test_tiny_automaton_spaces_stay_disjoint_and_solved(name):
    """In a tiny string space (1-2 segments of <= 2 symbols over 2: 6 one-segment strings) the
    held-out bucket may lack a label at a count: samples still come quickly, match the solver,
    and never cross the partition; train stays balanced at every count it holds both labels."""
    task = generators.get_task(name, n_sets=2, set_size=2, n_symbols=2, seg_len=2, max_segments=2, ood_max_segments=4)
    train = task.sample("train", 400, seed=1)
    test = task.sample("test", 200, seed=1)
    assert not {tuple(s.ids) for s in train} & {tuple(s.ids) for s in test}
    for s in train[:100] + test[:100] + task.sample("ood-segments", 100, seed=1):
        assert task.solve(s) == s.targets
    for n_seg, ys in _by_count(train).items():
        if 0 < np.mean(ys) < 1:
            assert abs(np.mean(ys) - 0.5) <= 4 * np.sqrt(0.25 / len(ys)), (n_seg, np.mean(ys))


# -- arithmetic: train_mix -------------------------------------------------------------------
def _ops(task, samples) -> np.ndarray:
    return np.array([task.op_count(s) for s in samples])


def test_arithmetic_train_mix_shares_are_honoured():
    task = generators.get_task("arithmetic", modulus=5, n_ops=4, ood_ops_max=5, train_mix="1,0,3,6")
    assert task.params["train_mix"] == "1,0,3,6"
    want = np.array([0.1, 0.0, 0.3, 0.6])
    for split, n in (("train", 3000), ("test-mix", 1000)):
        got = np.bincount(_ops(task, task.sample(split, n, seed=3)), minlength=5)[1:] / n
        assert got[1] == 0 and np.all(np.abs(got - want) <= 4 * np.sqrt(want * (1 - want) / n) + 1e-9), (split, got)
    assert task.op_counts("test-mix") == (1, 3, 4)  # a count of weight 0 is not reported
    assert set(_ops(task, task.sample("test", 50, seed=3))) == {4}
    # a list is accepted and spelled as one string (the sweep files' settings are scalars)
    assert generators.get_task("arithmetic", n_ops=3, train_mix=[1, 2, 3]).params["train_mix"] == "1.0,2.0,3.0"
    # all weight on n_ops: train has one count, so no test-mix
    assert "test-mix" not in generators.get_task("arithmetic", n_ops=3, train_mix="0,0,1").splits


def test_arithmetic_uniform_mix_is_the_old_draw():
    """train_mix = "uniform" (the default) draws exactly the samples synthlab always drew."""
    a = generators.get_task("arithmetic", n_ops=4, train_mix="uniform")
    b = generators.get_task("arithmetic", n_ops=4)
    assert b.params["train_mix"] == "uniform" and a.splits == b.splits
    for split in ("train", "test-mix"):
        assert [s.tokens for s in a.sample(split, 30, seed=9)] == [s.tokens for s in b.sample(split, 30, seed=9)]
    # and the weighted mix is deterministic in the seed
    c = generators.get_task("arithmetic", n_ops=4, train_mix="1,2,3,4")
    assert [s.tokens for s in c.sample("train", 30, seed=9)] == [s.tokens for s in c.sample("train", 30, seed=9)]


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(n_ops=3, train_mix="1,2"), "must give 3 weights"),
        (dict(n_ops=3, train_mix="1,2,3,4"), "must give 3 weights"),
        (dict(n_ops=3, train_mix="1,-1,2"), "finite, >= 0"),
        (dict(n_ops=3, train_mix="0,0,0"), "not all 0"),
        (dict(n_ops=3, train_mix="1,nan,2"), "finite"),
        (dict(n_ops=3, train_mix="one,two,three"), "comma-separated weights"),
        (dict(n_ops=3, train_mix="1,,2"), "comma-separated weights"),
        (dict(n_ops=3, train_mix=5), 'must be "uniform"'),
        (dict(n_ops=3, train_mix=[1, True, 2]), 'must be "uniform"'),
        (dict(n_ops=3, min_ops=2, train_mix="1,1,1"), "below min_ops=2"),
    ],
)
def test_arithmetic_train_mix_bad_values(params, match):
    with pytest.raises(ValueError, match=match) as e:
        generators.get_task("arithmetic", **params)
    assert "train_mix" in str(e.value) and "\n" not in str(e.value)


def _sample_of(task, row: np.ndarray) -> Sample:
    ids = row[row >= 0]
    empty = np.zeros(0, dtype=np.int64)
    return Sample("arithmetic", "train", 0, 0, {}, task.vocab, ids, empty, empty)


def test_arithmetic_chains_have_the_generators_law():
    """chains() (vectorised, for the mix script) draws valid chains with the law of generate():
    every chain passes the solver with n operators; the 1-operator chains of F_5 have the same
    distribution, and 3-operator chains the same shape statistics."""
    task = generators.get_task("arithmetic", modulus=5, n_ops=3, ood_ops_max=0)
    rng = np.random.default_rng(0)
    for n in (1, 2, 4):
        rows = task.chains(rng, n, 400)
        for row in rows:
            s = _sample_of(task, row)
            task.solve(s)
            assert s.tokens.count("=") == n and task.op_count(s) == n

    def law(n: int, count: int, key) -> tuple[Counter, Counter]:
        ours = Counter(key(_sample_of(task, r).tokens) for r in task.chains(np.random.default_rng(1), n, count))
        g = np.random.default_rng(2)
        q = {"modulus": 5, "min_ops": n, "n_ops": n}
        theirs = Counter(key([task.vocab[i] for i in task.generate(g, q)[0]]) for _ in range(count))
        return ours, theirs

    def tv(a: Counter, b: Counter, count: int) -> float:
        return 0.5 * sum(abs(a[k] - b[k]) for k in set(a) | set(b)) / count

    ours, theirs = law(1, 6000, tuple)
    assert set(ours) == set(theirs) and tv(ours, theirs, 6000) < 0.08  # ~100 chains

    def shape(toks):  # length, brackets, operators of E_3, answer
        prompt = toks[: toks.index("=")]
        return len(toks), prompt.count("("), "".join(t for t in prompt if t in "+-*/"), toks[-2]

    ours, theirs = law(3, 6000, lambda t: shape(t)[:2])
    assert tv(ours, theirs, 6000) < 0.04
    ours, theirs = law(3, 6000, lambda t: shape(t)[3])
    assert tv(ours, theirs, 6000) < 0.04


# -- scripts/arithmetic_mix.py ---------------------------------------------------------------
@pytest.fixture(scope="module")
def mix_script():
    return runpy.run_path(str(SCRIPT))


def test_mix_script_counts_the_reference_procedure(mix_script):
    """The script's counts equal a direct count of the same draws (a Python set of token
    tuples), the n_ops count fills the set to `size`; and its shares agree with the reference
    procedure run on generate() one chain at a time."""
    modulus, n_ops, size, seed = 5, 3, 6000, 11
    counts = mix_script["reference_counts"](modulus, n_ops, size, seed, batch=size)
    task = generators.get_task("arithmetic", modulus=modulus, n_ops=n_ops, ood_ops_max=0)
    rng = np.random.default_rng(seed)
    direct = []
    for n in range(1, n_ops):
        rows = task.chains(rng, n, int(n / 6 * size))
        direct.append(len({tuple(r[r >= 0]) for r in rows}))
    assert counts[:-1] == direct and sum(counts) == size
    assert direct[0] < 150 < int(size / 6)  # 1-operator chains collapse (F_5 holds ~100)
    # the reference's procedure with generate(), one chain at a time
    g = np.random.default_rng(seed + 1)
    ref = []
    for n in range(1, n_ops):
        q = {"modulus": modulus, "min_ops": n, "n_ops": n}
        ref.append(len({tuple(task.generate(g, q)[0]) for _ in range(int(n / 6 * size))}))
    ref.append(size - sum(ref))
    assert np.all(np.abs(np.array(counts) - ref) / size < 0.02), (counts, ref)
    # batches change the draws, not the law
    small = mix_script["reference_counts"](modulus, n_ops, size, seed, batch=700)
    assert np.all(np.abs(np.array(small) - counts) / size < 0.02), (small, counts)


def test_mix_script_prints_a_train_mix_the_task_takes(mix_script, capsys):
    mix_script["main"](["--modulus", "5", "--n-ops", "3", "--size", "3e3", "--seed", "4"])
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("# python scripts/arithmetic_mix.py --modulus 5 --n-ops 3 --size 3000 --seed 4")
    assert out[-1].startswith('train_mix = "') and out[-1].endswith('"')
    value = out[-1].split('"')[1]
    shares = np.array([float(x) for x in value.split(",")])
    assert len(shares) == 3 and abs(shares.sum() - 1) < 1e-5 and "e" not in value
    task = generators.get_task("arithmetic", modulus=5, n_ops=3, train_mix=value)
    assert task.op_counts("test-mix") == (1, 2, 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["--modulus", "12"],
        ["--n-ops", "0"],
        ["--size", "0"],
        ["--size", "many"],
        ["--seed", "-1"],
        ["--modulus", "2", "--n-ops", "1", "--size", "100"],
    ],
)
def test_mix_script_refuses_bad_input_with_exit_2(mix_script, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        mix_script["main"](argv)
    assert exit_.value.code == 2
    err = capsys.readouterr()
    assert err.out == "" and ": error: " in err.err.strip().splitlines()[-1]  # argparse's one line


# -- the presets -------------------------------------------------------------------------------
#: scripts/arithmetic_mix.py at size 1,000,000, seed 2023 (the commands in sweeps/arithmetic.toml)
SCRIPT_MIX = {
    "quick": (5, 4, "0.000095,0.003534,0.141798,0.854573"),
    "paper": (11, 6, "0.000473,0.03479,0.140678,0.190442,0.238095,0.395522"),
}
#: the reference's own data.py --under (guyuntian/CoT_benchmark @ 650a246), distinct chains per
#: operator count in its 1M training set, run here: --number_range 11 --length 6 / 5 --length 4
REFERENCE_COUNTS = {"quick": [95, 3533, 140986, 855386], "paper": [473, 34882, 140602, 190455, 238095, 395493]}


@pytest.mark.parametrize("preset", ["quick", "paper"])
def test_arithmetic_presets_use_the_reference_mix(preset):
    settings = presets.preset_settings("arithmetic", preset)
    modulus, n_ops, value = SCRIPT_MIX[preset]
    assert settings["task.train_mix"] == value
    task = generators.get_task("arithmetic", **presets.preset("arithmetic", preset)["task"])
    assert (task.params["modulus"], task.params["n_ops"]) == (modulus, n_ops)
    shares = np.array([float(x) for x in value.split(",")])
    ref = np.array(REFERENCE_COUNTS[preset]) / 1e6
    assert np.all(np.abs(shares - ref) < 0.002), (shares, ref)  # this generator vs the reference's
    ops = np.bincount(_ops(task, task.sample("train", 2000, seed=0)), minlength=n_ops + 1)[1:] / 2000
    assert np.all(np.abs(ops - shares) <= 4 * np.sqrt(shares * (1 - shares) / 2000) + 1e-9), ops


def test_arithmetic_paper_preset_does_not_clip_gradients():
    """The reference's train.py steps AdamW on the raw gradients; 0 is synthlab's 'off'."""
    assert presets.preset_settings("arithmetic", "paper")["train.grad_clip"] == 0
    cfg = presets.build_config("arithmetic", "rope", "paper")
    assert cfg.train.grad_clip == 0 and (cfg.train.grad_clip or None) is None  # fitting.py's gradient_clip_val


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["quick", "paper"])
def test_mix_script_reproduces_the_preset(mix_script, preset, capsys):
    """The recorded presets are the script's output at the reference's size (~20 s each)."""
    modulus, n_ops, value = SCRIPT_MIX[preset]
    mix_script["main"](["--modulus", str(modulus), "--n-ops", str(n_ops), "--size", "1000000", "--seed", "2023"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == f'train_mix = "{value}"'
