"""The 15 CHE tasks: generator vs independent solver, hand-worked examples, output lengths,
length laws, splits, determinism and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from synthlab.generators.base import Sample, input_hash_bucket
from synthlab.generators.che import EOS, PLACEHOLDER, TASKS

ALL = sorted(TASKS)
BINARY_TERMINATED = {"stack_manipulation", "binary_addition", "binary_multiplication"}


def literal(task, tokens: list[str]) -> Sample:
    """A sample made from hand-written tokens (only ``tokens`` matters to ``solve``)."""
    ids = np.array([task.token_id(t) for t in tokens], dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    return Sample(task.name, "test", 0, 0, {}, task.vocab, ids, empty, empty)


class ScriptedRng:
    """Stands in for a numpy Generator: ``integers`` returns the scripted values in order."""

    def __init__(self, *values):
        self.values = list(values)

    def integers(self, low, high=None, size=None):
        v = self.values.pop(0)
        return np.array(v, dtype=np.int64) if size is not None else v


# -- generator vs solver ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_generator_matches_solver(name):
    task = TASKS[name]()
    lo, hi = task.length_range("train")
    checked = 0
    for n in range(lo, hi + 1):  # every training length, 30 samples each
        for s in task.sample("train", 30, seed=7, length=n):
            assert task.solve(s) == s.targets, (s.tokens, s.targets)
            checked += 1
    for s in task.sample("train", 200, seed=8):  # per-sample lengths
        assert task.solve(s) == s.targets
        checked += 1
    for n in (41, 42, 63, 100, 127, 128, 255, 499, 500):  # a sample of OOD lengths
        for s in task.sample("ood", 8, seed=9, length=n):
            assert task.solve(s) == s.targets, (n, s.tokens)
            checked += 1
    assert checked >= 1400


@pytest.mark.parametrize("name", ALL)
def test_sample_layout(name):
    """Inputs then placeholders; scored = the first placeholders; loss = every placeholder."""
    task = TASKS[name]()
    ph = task.token_id(PLACEHOLDER)
    assert task.vocab[-1] == PLACEHOLDER and len(set(task.vocab)) == len(task.vocab)
    for n in (task.MIN_LENGTH, task.MIN_LENGTH + 1, 9, 40, 77):
        for s in task.sample("train" if n <= 40 else "ood", 10, seed=1, length=n):
            n_out = task.output_length(n)
            assert np.array_equal(np.flatnonzero(s.ids == ph), np.arange(len(s) - n_out, len(s)))
            assert len(s) - n_out == task.input_length(n)
            assert np.array_equal(s.scored, np.arange(len(s) - n_out, len(s) - n_out + len(s.scored)))
            assert PLACEHOLDER not in s.targets
            assert np.array_equal(s.loss_positions, np.arange(len(s) - n_out, len(s)))
            assert np.array_equal(s.loss_targets[: len(s.scored)], s.target_ids)
            if name in BINARY_TERMINATED:
                assert s.targets[-1] == EOS and EOS not in s.targets[:-1]
                assert all(task.vocab[i] == "0" for i in s.loss_targets[len(s.scored) :])
            else:
                assert len(s.scored) == n_out


EXPECTED_OUTPUT_LENGTH = {  # N -> number of placeholders, from the reference's output_length
    "even_pairs": lambda n: 1,
    "modular_arithmetic": lambda n: 1,
    "parity_check": lambda n: 1,
    "cycle_navigation": lambda n: 1,
    "stack_manipulation": lambda n: n + 1,
    "reverse_string": lambda n: n,
    "modular_arithmetic_brackets": lambda n: 1,
    "solve_equation": lambda n: 1,
    "duplicate_string": lambda n: 2 * n,
    "missing_duplicate_string": lambda n: 1,
    "odds_first": lambda n: n,
    "binary_addition": lambda n: n + 1,
    "binary_multiplication": lambda n: n,
    "compute_sqrt": lambda n: math.ceil(n / 2),
    "bucket_sort": lambda n: n,
}


@pytest.mark.parametrize("name", ALL)
def test_output_length(name):
    task = TASKS[name]()
    for n in (3, 4, 7, 8, 40, 41, 500):
        assert task.output_length(n) == EXPECTED_OUTPUT_LENGTH[name](n)
        want_in = n - 1 if name == "modular_arithmetic" and n % 2 == 0 else n
        assert task.input_length(n) == want_in


# -- hand-worked examples ----------------------------------------------------------------------

GOLDEN = {
    "even_pairs": [("0 0 1 1 1 0", "even"), ("0 1 0 1 0 0 1", "odd"), ("1", "even")],
    "modular_arithmetic": [("1 + 2 * 3", "2"), ("1 - 1 - 1", "4"), ("0 * 1 + 4 * 3 - 2", "0"), ("2 - 3 * 4 * 4", "4")],
    "parity_check": [("1 0 1 1", "odd"), ("1 1 0 0", "even"), ("0", "even")],
    "cycle_navigation": [("R L S L L", "3"), ("R R R L", "2"), ("L", "4")],
    "stack_manipulation": [
        ("0 1 1 0 PUSH1 POP POP", "1 1 0 <eos>"),
        ("1 1 0 POP POP POP", "<eos>"),
        ("1 POP POP PUSH0 PUSH1", "1 0 <eos>"),
    ],
    "reverse_string": [("0 1 1", "1 1 0"), ("1 0 0 0", "0 0 0 1")],
    "modular_arithmetic_brackets": [
        ("( 1 + ( - 2 * 3 ) )", "0"),
        ("( ( 3 - 4 ) * ( - 2 ) )", "2"),
        ("- 3", "2"),
        ("( 4 - - 1 )", "0"),
    ],
    "solve_equation": [("( x + 3 ) = 1", "3"), ("- x = 2", "3"), ("( 4 - ( - x ) ) = 0", "1")],
    "duplicate_string": [("0 1", "0 1 0 1"), ("1 1 0", "1 1 0 1 1 0")],
    "missing_duplicate_string": [("0 1 1 0 0 _ 1 0", "1"), ("1 0 1 1 _ 1 .", "0"), ("_ 1", "1")],
    "odds_first": [("0 0 1 1 0 1 0 1", "0 1 1 1 0 1 0 0"), ("1 1 0", "1 1 0"), ("0 1 1 0", "1 0 0 1")],
    "binary_addition": [
        ("0 0 1 + 0 1 1 0 1", "0 1 0 1 1 <eos>"),  # 4 + 22 = 26
        ("1 0 0 1 + 0 0 0 0 0 1", "1 0 0 1 0 1 <eos>"),  # 9 + 32 = 41
        ("1 + 1", "0 1 <eos>"),
    ],
    "binary_multiplication": [
        ("0 0 1 * 0 1 1 0 1", "0 0 0 1 1 0 1 <eos>"),  # 4 * 22 = 88
        ("1 0 0 1 * 0 0 0 0 0 1", "0 0 0 0 0 1 0 0 1 <eos>"),  # 9 * 32 = 288
        ("1 1 * 1 1", "1 0 0 1 <eos>"),
    ],  # 3 * 3 = 9
    "compute_sqrt": [("1 0 0 1 0 1", "1 1 0"), ("1 1 1", "1 0"), ("0 0 0 1 0 0 0 0 0", "0 0 1 0 1")],
    "bucket_sort": [("1 0 2 0 4 1 1 2", "0 0 1 1 1 2 2 4"), ("4 3", "3 4")],
}


@pytest.mark.parametrize("name", ALL)
def test_golden_examples(name):
    task = TASKS[name]()
    assert len(GOLDEN[name]) >= 2
    for inp, out in GOLDEN[name]:
        toks = inp.split()
        n = len(toks) + (1 if name == "modular_arithmetic" and len(toks) % 2 == 0 else 0)
        sample = literal(task, toks + [PLACEHOLDER] * task.output_length(n))
        assert task.solve(sample) == out.split(), inp


def _make(task, rng, n):
    inp, out, n_scored = task.make(rng, n)
    return " ".join(task.vocab[i] for i in inp), " ".join(task.vocab[i] for i in out[:n_scored]), len(out)


def test_golden_generators_with_scripted_draws():
    """The vectorised generators reproduce hand-worked cases when fed chosen random draws."""
    t = TASKS["stack_manipulation"]()
    # the reference docstring example: stack 0 1 1 0, then PUSH1 POP POP (action ids 4 2 2)
    assert _make(t, ScriptedRng(4, [0, 1, 1, 0], [4, 2, 2]), 7) == ("0 1 1 0 PUSH1 POP POP", "1 1 0 <eos>", 8)
    assert _make(t, ScriptedRng(3, [1, 1, 0], [2, 2, 2]), 6) == ("1 1 0 POP POP POP", "<eos>", 7)
    # pops past the bottom are ignored; the last push to each level is what stays there
    assert _make(t, ScriptedRng(2, [1, 0], [2, 2, 2, 3, 4, 2, 4, 3]), 10) == (
        "1 0 POP POP POP PUSH0 PUSH1 POP PUSH1 PUSH0",
        "0 1 0 <eos>",
        11,
    )
    assert _make(t, ScriptedRng(2, [1, 0], [2, 3, 4]), 5) == ("1 0 POP PUSH0 PUSH1", "1 0 1 <eos>", 6)

    t = TASKS["binary_addition"]()
    assert _make(t, ScriptedRng(3, [0, 0, 1], [0, 1, 1, 0, 1]), 9) == ("0 0 1 + 0 1 1 0 1", "0 1 0 1 1 <eos>", 10)
    # an all-zero operand is redrawn (operands are >= 1)
    assert _make(t, ScriptedRng(1, [0], [1], [1]), 3) == ("1 + 1", "0 1 <eos>", 4)
    assert _make(t, ScriptedRng(2), 2) == ("0 1", "0 1 <eos>", 3)

    t = TASKS["binary_multiplication"]()
    assert _make(t, ScriptedRng(3, [0, 0, 1], [0, 1, 1, 0, 1]), 9) == ("0 0 1 * 0 1 1 0 1", "0 0 0 1 1 0 1 <eos>", 9)

    t = TASKS["modular_arithmetic"]()  # digits then ops (0 +, 1 -, 2 *); N = 10 -> 9 tokens
    assert _make(t, ScriptedRng([2, 3, 4, 4, 1], [1, 2, 2, 0]), 10) == ("2 - 3 * 4 * 4 + 1", "0", 1)
    assert _make(t, ScriptedRng([0, 3, 2], [2, 1]), 5) == ("0 * 3 - 2", "3", 1)

    t = TASKS["missing_duplicate_string"]()
    assert _make(t, ScriptedRng([1, 0, 1], 4), 7) == ("1 0 1 1 _ 1 .", "0", 1)

    t = TASKS["compute_sqrt"]()
    assert _make(t, ScriptedRng([1, 0, 0, 1, 0, 1]), 6) == ("1 0 0 1 0 1", "1 1 0", 3)


def test_degenerate_lengths_kept():
    """Kept degenerate lengths follow the reference: even_pairs N = 1 is always even,
    binary_addition N <= 2 copies one number, stack_manipulation N = 1 is one stack bit."""
    t = TASKS["even_pairs"]()
    assert {tuple(s.targets) for s in t.sample("train", 50, length=1)} == {("even",)}
    t = TASKS["binary_addition"]()
    assert {(tuple(s.tokens), tuple(s.targets)) for s in t.sample("train", 50, length=1)} == {
        (("0", "?", "?"), ("0", EOS))
    }
    inputs = {tuple(s.tokens[:2]) for s in t.sample("train", 200, length=2)}
    assert inputs == {("0", "0"), ("1", "0"), ("0", "1")}  # x in 0..2, "1 1" never
    t = TASKS["stack_manipulation"]()
    for s in t.sample("train", 20, length=1):
        assert s.tokens[0] in ("0", "1") and s.targets == [s.tokens[0], EOS]


# -- lengths and splits ------------------------------------------------------------------------


def test_train_length_law_is_uniform():
    task = TASKS["parity_check"]()
    rng = np.random.default_rng(0)
    draws = np.array([task.train_overrides(rng)["length"] for _ in range(40_000)])
    assert draws.min() == 1 and draws.max() == 40
    counts = np.bincount(draws, minlength=41)[1:]
    expected = len(draws) / 40
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 72.1  # chi-square, 39 degrees of freedom, p = 0.001
    # the minimum follows the task's minimum length
    t = TASKS["solve_equation"]()
    assert {t.train_overrides(rng)["length"] for _ in range(2000)} == set(range(3, 41))
    # without an override every sample draws its own length from the split's range
    lengths = [len(s) - 1 for s in task.sample("train", 2000, seed=3)]
    counts = np.bincount(lengths, minlength=41)[1:]
    assert counts.min() > 20 and counts.max() < 80


@pytest.mark.parametrize("name", ALL)
def test_eval_groups_and_ranges(name):
    task = TASKS[name]()
    assert task.eval_groups("train") is None
    ood = task.eval_groups("ood")
    assert ood[0] == {"length": 41} and ood[-1] == {"length": 500} and len(ood) == 460
    test = task.eval_groups("test")
    assert test[-1] == {"length": 40} and test[0] == {"length": task.test_lo}
    # test_lo: the first length with >= 1024 distinct inputs
    assert task.n_inputs(task.test_lo) >= 1024
    assert all(task.n_inputs(n) < 1024 for n in range(task.MIN_LENGTH, task.test_lo))
    for s in task.sample("ood", 5, seed=0):
        n_in = int(np.count_nonzero(s.ids != task.token_id(PLACEHOLDER)))
        assert 40 <= n_in <= 500


def test_held_out_lengths_per_task():
    lo = {name: TASKS[name]().test_lo for name in ALL}
    assert lo["parity_check"] == 10 and lo["compute_sqrt"] == 11  # 2^10 - 1 < 1024
    assert lo["bucket_sort"] == 5 and lo["cycle_navigation"] == 7 and lo["modular_arithmetic"] == 5
    assert lo["stack_manipulation"] == 6 and lo["binary_addition"] == 9
    assert lo["modular_arithmetic_brackets"] == 9 and lo["solve_equation"] == 11
    assert lo["missing_duplicate_string"] == 14


@pytest.mark.parametrize("name", ["parity_check", "solve_equation", "binary_addition", "stack_manipulation"])
def test_test_split_is_hash_disjoint_from_train(name):
    task = TASKS[name]()
    n = task.test_lo
    test = task.sample("test", 200, seed=0, length=n)
    train = task.sample("train", 400, seed=0, length=n)
    assert all(input_hash_bucket(s.ids, task.HASH_BUCKETS) == 0 for s in test)
    assert all(input_hash_bucket(s.ids, task.HASH_BUCKETS) != 0 for s in train)
    assert not {tuple(s.ids) for s in test} & {tuple(s.ids) for s in train}
    # below test_lo train takes every string (the reference law), and test refuses the length
    short = task.sample("train", 300, seed=0, length=n - 1)
    assert any(input_hash_bucket(s.ids, task.HASH_BUCKETS) == 0 for s in short)
    with pytest.raises(ValueError, match="'length'"):
        task.sample("test", 1, length=n - 1)


def test_no_test_split_when_train_lengths_are_too_short():
    task = TASKS["parity_check"](train_max_length=8, test_min_length=9, test_max_length=20)
    assert task.splits == ("train", "ood")
    assert task.eval_groups("ood")[0] == {"length": 9}
    with pytest.raises(ValueError, match="unknown split"):
        task.sample("test", 1)
    quick = TASKS["parity_check"](train_max_length=20, test_min_length=21, test_max_length=100)
    assert quick.eval_groups("test") == [{"length": n} for n in range(10, 21)]


def test_separators_and_vocab():
    assert TASKS["binary_addition"]().separators == ("+",)
    assert TASKS["binary_multiplication"]().separators == ("*",)
    assert TASKS["solve_equation"]().separators == ("=",)
    assert TASKS["parity_check"]().separators == ()
    for name in ALL:
        task = TASKS[name]()
        assert task.scoring == "placeholder" and task.length_param == "length" and task.family == "che"
        assert task.describe()["level"] in ("R", "DCF", "CS")


# -- determinism and bad input ----------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_determinism(name):
    task = TASKS[name]()
    a = task.sample("train", 6, seed=11, length=17)
    b = TASKS[name]().sample("train", 6, seed=11, length=17)
    assert all(np.array_equal(x.ids, y.ids) and np.array_equal(x.target_ids, y.target_ids) for x, y in zip(a, b))
    c = task.sample("train", 2, seed=11, start=4, length=17)  # addressable: index 4 is index 4
    assert np.array_equal(c[0].ids, a[4].ids) and np.array_equal(c[1].ids, a[5].ids)
    d = task.sample("train", 6, seed=12, length=17)
    assert any(not np.array_equal(x.ids, y.ids) for x, y in zip(a, d))


@pytest.mark.parametrize("name", ALL)
def test_bad_input(name):
    cls = TASKS[name]
    with pytest.raises(ValueError, match="'length'"):
        cls(length=0)
    with pytest.raises(ValueError, match="'size'"):
        cls(size=3)
    with pytest.raises(ValueError, match="'length'"):
        cls().sample("train", 1, length=0)
    with pytest.raises(ValueError, match="'length'"):
        cls().sample("ood", 1, length="many")


def test_task_minimum_lengths():
    for name, minimum in (("solve_equation", 3), ("binary_multiplication", 3), ("missing_duplicate_string", 2)):
        with pytest.raises(ValueError, match=f"'length' must be >= {minimum}"):
            TASKS[name](length=minimum - 1)
        with pytest.raises(ValueError, match="'length'"):
            TASKS[name]().sample("train", 1, length=minimum - 1)
        assert TASKS[name](length=minimum).sample("train", 1)[0].params["length"] == minimum
    with pytest.raises(ValueError, match="'test_min_length'"):
        TASKS["parity_check"](train_max_length=50)
    with pytest.raises(ValueError, match="'test_max_length'"):
        TASKS["parity_check"](test_max_length=30)


# ---- scripts/trivial_baselines.py: the floor a CHE result must clear ----------------------------


def _baselines_script():
    import runpy
    from pathlib import Path

    return runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "trivial_baselines.py"))


def test_trivial_baselines_find_the_floors_above_chance():
    """1 / classes is the floor only for balanced outputs: brackets' answer 0 is frequent
    (~30 %), bucket_sort's sorted output follows its position (~80 %); parity stays at 50 %."""
    baselines = _baselines_script()["baselines"]
    lengths = list(range(30, 101, 35))
    mab = baselines(TASKS["modular_arithmetic_brackets"](), lengths, 400, 0)
    assert mab["chance"] == 20.0 and 26.0 < mab["constant"] < 36.0
    sort = baselines(TASKS["bucket_sort"](), lengths, 200, 0)
    assert sort["constant"] < 25.0 and sort["position"] > 75.0
    parity = baselines(TASKS["parity_check"](), lengths, 400, 0)
    assert abs(parity["constant"] - 50.0) < 6.0 and abs(parity["position"] - 50.0) < 6.0
    stack = baselines(TASKS["stack_manipulation"](), lengths, 200, 0)  # scored up to its terminator: ragged
    assert 30.0 < stack["position"] < 65.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tasks", "even_pairs,nope"], "not a CHE task"),
        (["--preset", "huge"], "unknown"),
        (["--samples", "1"], "--samples"),
    ],
)
def test_trivial_baselines_bad_input_exits_2(argv, message, capsys):
    main = _baselines_script()["main"]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr()
    assert message in err.err and err.out == ""
