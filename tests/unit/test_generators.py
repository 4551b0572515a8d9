"""Generators: every task and split checked against its independent solver, hand-written
golden samples, statistical laws, determinism, train/held-out disjointness, bad input.

CHE tasks are tested elsewhere (their own helper); this file covers flipflop, selective_copy,
counting, arithmetic, binfa, nfa, mqar and passkey.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from synthlab import generators
from synthlab.generators.base import Sample, example_rng

# small parameters: fast samples and small input spaces (collisions are likely, which is what
# the disjointness tests need)
SMALL = {
    "flipflop": dict(n_pairs=6, ood_len_pairs=8),
    "selective_copy": dict(n_data=3, n_copy=3, n_blank=2, n_blank_dense=1, n_blank_sparse=4),
    "counting": dict(max_steps=6, n_vars=2),
    "arithmetic": dict(n_ops=2, ood_ops_max=4),
    "binfa": dict(n_sets=2, set_size=2, n_symbols=2, seg_len=2, max_segments=2, ood_max_segments=4),
    "nfa": dict(n_sets=2, set_size=2, n_symbols=2, seg_len=2, max_segments=2, ood_max_segments=4),
    "mqar": dict(vocab_size=10, length=12, n_kv=2, ood_lengths="16,24"),
    "passkey": dict(length=14, target_length=40, k_digits=2),
}
# moderate parameters: richer samples, still fast
MEDIUM = {
    "flipflop": dict(n_pairs=32, ood_len_pairs=64),
    "selective_copy": dict(n_copy=16, n_blank=16, n_blank_dense=8, n_blank_sparse=32),
    "counting": dict(max_steps=40, n_vars=3),
    "arithmetic": dict(n_ops=4, ood_ops_max=6),
    "binfa": dict(seg_len=4, max_segments=4, ood_max_segments=10),
    "nfa": dict(seg_len=4, max_segments=4, ood_max_segments=10),
    "mqar": dict(vocab_size=64, length=48, n_kv=6, ood_lengths="96"),
    "passkey": dict(length=64, target_length=256, k_digits=5),
}
NAMES = list(SMALL)
CASES = [(n, s) for n in NAMES for s in generators.get_task(n, **SMALL[n]).splits]


def task_of(name: str, size: dict = SMALL, **extra):
    return generators.get_task(name, **{**size[name], **extra})


def make_sample(task, tokens: str | list[str], split: str = "test") -> Sample:
    """A hand-written sample (scored/targets left empty: only ``solve`` looks at it)."""
    toks = tokens.split() if isinstance(tokens, str) else tokens
    ids = np.array([task.token_id(t) for t in toks], dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    return Sample(task.name, split, 0, 0, dict(task.params), task.vocab, ids, empty, empty)


def check_structure(task, s: Sample) -> None:
    V = len(task.vocab)
    assert s.ids.dtype == np.int64 and s.ids.ndim == 1
    assert s.ids.min() >= 0 and s.ids.max() < V
    assert len(s.scored) == len(s.target_ids) >= 1
    assert s.scored.min() >= 0 and s.scored.max() < len(s.ids)
    assert np.all(np.diff(s.scored) > 0)
    if task.name == "mqar":  # values are labels only: the slot after a query key is filler
        assert not s.ids[s.scored + 1].any()
    elif task.scoring in ("next_token", "greedy"):
        assert np.array_equal(s.target_ids, s.ids[s.scored + 1])
    rec = s.to_record()
    json.dumps(rec)
    assert rec["tokens"] == s.tokens and rec["targets"] == s.targets


# -- every split against the solver ---------------------------------------------------------
@pytest.mark.parametrize("name,split", CASES)
def test_small_samples_match_solver(name, split):
    task = task_of(name)
    n = 1500 if split == "train" else 400  # held-out splits reject 15/16 draws
    for s in task.sample(split, n, seed=3):
        check_structure(task, s)
        assert task.solve(s) == s.targets, " ".join(s.tokens)


@pytest.mark.parametrize("name,split", [(n, s) for n in NAMES for s in task_of(n, MEDIUM).splits])
def test_medium_samples_match_solver(name, split):
    task = task_of(name, MEDIUM)
    for s in task.sample(split, 300 if split == "train" else 100, seed=5):
        check_structure(task, s)
        assert task.solve(s) == s.targets


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_default_size_samples_match_solver(name):
    task = generators.get_task(name)
    for split in task.splits:
        groups = task.eval_groups(split) or [{}]
        for g in groups:
            n = (200 if split == "train" else 30) if not g else 3
            for s in task.sample(split, n, seed=11, **g):
                check_structure(task, s)
                assert task.solve(s) == s.targets
                if "length" in g:
                    assert len(s) == g["length"]


# -- golden samples (hand-checked) ----------------------------------------------------------
GOLDEN = {
    "flipflop": [({}, "w 1 i 0 r 1 w 0 i 1 r 0", ["1", "0"]), ({}, "w 0 w 1 r 1 i 0 i 1 r 1", ["1", "1"])],
    "selective_copy": [
        ({}, "D _ _ C F _ F _ E | D C F F E", list("DCFFE")),
        ({}, "_ _ A | A", ["A"]),
        ({}, "P B _ | P B", ["P", "B"]),
    ],
    "counting": [
        ({}, "pass ; pass ; a = 0 ; pass ; a ++ ; pass ; pass ; a ++ ; print a 2", ["2"]),
        ({"n_vars": 3}, "a = 0 ; b = 0 ; a ++ ; b ++ ; b ++ ; a = 0 ; b ++ ; print b 3", ["3"]),
        ({"n_vars": 3}, "c = 0 ; a = 0 ; c ++ ; a ++ ; c = 0 ; pass ; print c 0", ["0"]),
    ],
    "mqar": [
        (
            {"vocab_size": 8, "length": 12, "n_kv": 2, "ood_lengths": "16"},
            "k1 v5 k3 v4 . . k3 . . . k1 .",
            ["v4", "v5"],
        ),
        (
            {"vocab_size": 8, "length": 12, "n_kv": 2, "ood_lengths": "16"},
            "k2 v6 k1 v7 k1 . k2 . . . . .",
            ["v7", "v6"],
        ),
    ],
    "passkey": [
        ({"length": 16, "k_digits": 3}, "The grass <key> 3 1 4 is green . The sky <query> 3 1 4", ["3", "1", "4"]),
        ({"length": 16, "k_digits": 3}, "<key> 0 0 7 The grass is green . The sky <query> 0 0 7", ["0", "0", "7"]),
    ],
}


@pytest.mark.parametrize(
    "name,params,tokens,targets", [(n, p, t, y) for n, cases in GOLDEN.items() for p, t, y in cases]
)
def test_golden_solver(name, params, tokens, targets):
    task = generators.get_task(name, **params)
    assert task.solve(make_sample(task, tokens)) == targets


def test_golden_arithmetic_chain():
    # 8*2 = 16 = 5; 5*10 = 50 = 6; 6*3 = 18 = 7; 7*6 = 42 = 9; 9+0 = 9; 6*9 = 54 = 10 (mod 11)
    chain = (
        "<bos> 8 * 2 * 10 * ( 6 * 3 * 6 + 0 ) = 5 * 10 * ( 6 * 3 * 6 + 0 ) = 6 * ( 6 * 3 * 6 + 0 ) "
        "= 6 * ( 7 * 6 + 0 ) = 6 * ( 9 + 0 ) = 6 * 9 = 10 <eos>"
    )
    task = generators.get_task("arithmetic")
    s = make_sample(task, chain)
    toks = chain.split()
    assert task.solve(s) == toks[toks.index("=") + 1 :]
    assert task.prompt_length(s) == toks.index("=") + 1 == 17  # <bos>, 15 tokens, =
    assert task.vocab[task.answer_id(s)] == "10"
    # 3 / 4 = 3 * 4^-1 = 3 * 3 = 9 (4 * 3 = 12 = 1); (9 - 2) = 7; 1 + 7 = 8
    ok = "<bos> 1 + ( 3 / 4 - 2 ) = 1 + ( 9 - 2 ) = 1 + 7 = 8 <eos>"
    assert task.solve(make_sample(task, ok))[-2:] == ["8", "<eos>"]


@pytest.mark.parametrize(
    "chain,why",
    [
        ("<bos> 2 + 3 * 4 = 3 <eos>", "exactly one"),  # two operators at once (value is right: 2 + 12 = 14 = 3)
        ("<bos> 2 + 3 = 6 <eos>", "value"),  # wrong value
        ("<bos> 2 + 3 * 4 = 5 * 4 = 9 <eos>", "value"),  # evaluates + before *
        ("<bos> 2 + 3 = 5 = 5 <eos>", "exactly one"),  # a step without an operator
        ("<bos> 2 + 3 = 5 <eos> 5", "<eos>"),  # not ending with <eos>
    ],
)
def test_arithmetic_solver_rejects_invalid_chains(chain, why):
    task = generators.get_task("arithmetic")
    with pytest.raises(ValueError, match=why):
        task.solve(make_sample(task, chain))
    # the bracketed version of the third chain is valid: (2 + 3) * 4 = 20 = 9
    assert task.solve(make_sample(task, "<bos> ( 2 + 3 ) * 4 = 5 * 4 = 9 <eos>"))[-2:] == ["9", "<eos>"]


def test_arithmetic_brackets_and_steps():
    """Generated chains: brackets only where precedence needs them; each step removes one op."""
    task = task_of("arithmetic", MEDIUM)
    for s in task.sample("train", 300, seed=2):
        toks = s.tokens
        exprs = " ".join(toks[1:-1]).split(" = ")
        n_ops = [sum(t in "+-*/" for t in e.split()) for e in exprs]
        assert n_ops == list(range(n_ops[0], -1, -1))
        for e in exprs:
            e = e.split()
            for i, t in enumerate(e):
                if t == "(":  # the bracket is needed: previous '/' or '* -' before / '* /' after a +- group
                    j = e.index(")", i)
                    inner, prev = e[i + 1 : j], e[i - 1] if i else None
                    nxt = e[j + 1] if j + 1 < len(e) else None
                    if len(inner) == 3:  # an innermost "( a op b )"
                        assert prev == "/" or (inner[1] in "+-" and (prev in ("*", "-") or nxt in ("*", "/")))


def test_arithmetic_answer_and_prompt_methods():
    task = task_of("arithmetic", MEDIUM)
    for s in task.sample("test", 50, seed=1):
        k = task.prompt_length(s)
        assert s.tokens[k - 1] == "=" and "=" not in s.tokens[: k - 1]
        assert s.scored[0] == k - 1 and s.scored[-1] == len(s) - 2
        assert s.tokens[-1] == "<eos>" and task.answer_id(s) == s.ids[-2]
        assert task.vocab[task.answer_id(s)] == s.tokens[-2] and s.tokens[-2].isdigit()


def _hand_automaton(task):
    """States 0,1 (Q_1) and 2,3 (Q_2); starts 0, 2; F = {2}.
    a: 0->{1} 1->{0} 2->{2} 3->{3};  b: 0->{0,1} 1->{1} 2->{3} 3->{2,3};
    #: 0->{0} 1->{2} 2->{} 3->{0,2}."""
    d = np.zeros((3, 4, 4), dtype=bool)
    for a, table in enumerate(
        [{0: [1], 1: [0], 2: [2], 3: [3]}, {0: [0, 1], 1: [1], 2: [3], 3: [2, 3]}, {0: [0], 1: [2], 2: [], 3: [0, 2]}]
    ):
        for q, ts in table.items():
            d[a, q, ts] = True
    task.set_automaton(d, 0, np.array([False, False, True, False]))


@pytest.mark.parametrize("name", ["binfa", "nfa"])
def test_golden_automaton(name):
    task = generators.get_task(name, n_sets=2, set_size=2, n_symbols=2, seg_len=3, max_segments=3, ood_max_segments=6)
    _hand_automaton(task)
    # {0} -a-> {1} -#-> {2}: accept
    assert task.solve(make_sample(task, "a # Y")) == ["Y"]
    # {0} -a-> {1} -a-> {0} -#-> {0}: reject
    assert task.solve(make_sample(task, "a a # N")) == ["N"]
    # {0} -a-> {1} -#-> {2} -b-> {3} -#-> {0,2}: accept; then -b-> {0,1,3} -#-> {0,2}: accept
    assert task.solve(make_sample(task, "a # b # b # Y")) == ["Y"]
    # {0} -b-> {0,1} -#-> {0,2} -a-> {1,2} -#-> {2} -a-> {2} -#-> {}: dead, reject
    assert task.solve(make_sample(task, "b # a # a # N")) == ["N"]
    # the generator's matrix simulation agrees: segments as (n_seg, seg_len) with -1 padding
    assert task._simulate(np.array([[1, -1, -1], [0, -1, -1], [0, -1, -1]])).tolist() == [True, True, False]
    assert task._simulate(np.array([[0, 0, -1]])).tolist() == [False]
    traced = generators.get_task(
        name, n_sets=2, set_size=2, n_symbols=2, seg_len=3, max_segments=3, ood_max_segments=6, trace=True
    )
    _hand_automaton(traced)
    assert traced.solve(make_sample(traced, "b # Y a # Y a # N")) == ["Y", "Y", "N"]


# generator output pinned (hand-checked; also pins determinism across versions)
PINNED = {
    "flipflop": (dict(n_pairs=3), "w 0 r 0 r 0", ["0", "0"]),
    "selective_copy": (SMALL["selective_copy"], "B A B _ _ | B A B", ["B", "A", "B"]),
    "counting": (dict(max_steps=6, n_vars=2), "a = 0 ; pass ; a ++ ; pass ; print a 1", ["1"]),
    "arithmetic": (dict(n_ops=2, ood_ops_max=3), "<bos> 1 - 4 = 8 <eos>", ["8", "<eos>"]),
    "mqar": (dict(vocab_size=10, length=12, n_kv=2, ood_lengths="16"), "k1 v8 k2 v5 k1 . k2 . . . . .", ["v8", "v5"]),
    "passkey": (SMALL["passkey"], "The grass is green <key> 4 1 . The sky is <query> 4 1", ["4", "1"]),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_pinned_generator_output(name):
    params, tokens, targets = PINNED[name]
    s = generators.get_task(name, **params).sample("train", 1, seed=0)[0]
    assert " ".join(s.tokens) == tokens and s.targets == targets


# -- statistical laws -----------------------------------------------------------------------
@pytest.mark.parametrize("split,p_i", [("train", 0.8), ("test", 0.8), ("ood-sparse", 0.98), ("ood-dense", 0.1)])
def test_flipflop_instruction_frequencies(split, p_i):
    task = generators.get_task("flipflop", n_pairs=64)
    n = 200 if split == "train" else 60
    instr = np.concatenate([s.ids[2:-2:2] for s in task.sample(split, n, seed=1)])  # free instructions only
    counts = np.bincount(instr, minlength=3) / len(instr)  # w, r, i
    assert abs(counts[2] - p_i) < 0.02
    assert abs(counts[0] - counts[1]) < 0.03
    first_last = [(s.tokens[0], s.tokens[-2]) for s in task.sample(split, 20, seed=2)]
    assert set(first_last) == {("w", "r")}


def test_flipflop_read_bits_follow_last_write():
    task = generators.get_task("flipflop", n_pairs=64)
    for s in task.sample("ood-dense", 30, seed=4):
        assert s.tokens[0] == "w" and s.tokens[-2] == "r"
        assert [s.tokens[p] for p in s.scored] == ["r"] * len(s.scored)


@pytest.mark.parametrize("name", ["binfa", "nfa"])
@pytest.mark.parametrize("split", ["train", "test", "ood-segments"])
def test_automaton_labels_balanced(name, split):
    task = generators.get_task(name, **MEDIUM[name])
    n = 1000 if split != "test" else 300
    ys = np.array([s.targets[-1] == "Y" for s in task.sample(split, n, seed=7)])
    tol = 0.05 if split != "test" else 0.09  # test: balanced up to the hash partition
    assert abs(ys.mean() - 0.5) < tol


@pytest.mark.parametrize("name", ["binfa", "nfa"])
def test_automaton_segment_counts(name):
    task = generators.get_task(name, **MEDIUM[name])
    p = task.params
    seg = Counter(s.tokens.count("#") for s in task.sample("train", 800, seed=1))
    assert set(seg) == set(range(1, p["max_segments"] + 1))
    ood = Counter(s.tokens.count("#") for s in task.sample("ood-segments", 300, seed=1))
    assert min(ood) > p["max_segments"] and max(ood) <= p["ood_max_segments"]
    for s in task.sample("train", 100, seed=2):  # U{1..seg_len} symbols per segment
        lens = [len(x.split()) for x in " ".join(s.tokens[:-1]).split("#")[:-1]]
        assert all(1 <= L <= p["seg_len"] for L in lens)


def test_automaton_is_deterministic_in_its_seed():
    a, b = generators.get_task("binfa"), generators.get_task("binfa")
    c = generators.get_task("binfa", automaton_seed=1)
    assert np.array_equal(a.delta, b.delta) and np.array_equal(a.accept, b.accept)
    assert not np.array_equal(a.delta, c.delta)
    # block structure: symbols stay inside Q_i, '#' goes to start states only
    k, m = a.params["n_sets"], a.params["set_size"]
    blocks = np.kron(np.eye(k, dtype=bool), np.ones((m, m), dtype=bool))
    assert not (a.delta[:-1] & ~blocks).any()
    assert a.delta[:-1].any(axis=2).all()  # symbol transitions are non-empty
    starts = np.zeros(k * m, dtype=bool)
    starts[::m] = True
    assert not a.delta[-1][:, ~starts].any()
    assert a.accept[starts].any() and not a.accept[~starts].any() and not a.accept[starts].all()


def test_counting_uniform_number_of_statements():
    task = generators.get_task("counting", max_steps=8, n_vars=3)
    counts = Counter(s.tokens.count(";") for s in task.sample("train", 3000, seed=1))
    assert set(counts) == set(range(3, 9))
    freq = np.array([counts[n] for n in range(3, 9)]) / 3000
    assert np.all(np.abs(freq - 1 / 6) < 0.03)


def test_counting_statement_weights():
    task = generators.get_task("counting", max_steps=200)
    kinds = Counter()
    for s in task.sample("train", 200, seed=2):
        body = " ".join(s.tokens[:-3]).split(" ;")
        kinds.update("pass" if "pass" in x else "++" if "++" in x else "set" for x in body if x.strip())
    total = sum(kinds.values())
    # pass / (set + incr + pass) ~ 50 / 58 (slightly more: increments get redrawn)
    assert 0.84 < kinds["pass"] / total < 0.91
    assert kinds["++"] > 3 * kinds["set"]
    short = Counter(t for s in task.sample("ood-short", 30, seed=2) for t in s.tokens)
    long_ = Counter(t for s in task.sample("ood-long", 30, seed=2) for t in s.tokens)
    assert short["pass"] / short[";"] < 0.7 < 0.9 < long_["pass"] / long_[";"]


def test_counting_values_bounded_and_print_variable_set():
    task = generators.get_task("counting", max_steps=300, n_vars=5, max_value=3)
    seen = set()
    for s in task.sample("train", 100, seed=1):
        v = s.tokens[-2]
        assert f"{v} = 0" in " ".join(s.tokens)
        seen.add(int(s.targets[0]))
    assert seen <= {0, 1, 2, 3} and 3 in seen


def test_arithmetic_operator_count_uniform():
    task = generators.get_task("arithmetic", n_ops=4)
    ops = Counter(
        sum(t in ("+", "-", "*", "/") for t in s.tokens[: s.tokens.index("=")])
        for s in task.sample("train", 2000, seed=1)
    )
    assert set(ops) == {1, 2, 3, 4}
    assert all(abs(ops[k] / 2000 - 0.25) < 0.04 for k in ops)
    for k in (7, 8):
        for s in task.sample(f"ood-ops-{k}", 10, seed=1):
            assert s.tokens.count("=") == k


def test_mqar_layout():
    task = task_of("mqar", MEDIUM)
    n = task.params["n_kv"]
    for s in task.sample("train", 100, seed=1):
        t = s.tokens
        keys, vals = t[0 : 2 * n : 2], t[1 : 2 * n : 2]
        assert len(set(keys)) == n and len(set(vals)) == n
        assert all(k.startswith("k") for k in keys) and all(v.startswith("v") for v in vals)
        assert len(s.scored) == n and sorted(t[p] for p in s.scored) == sorted(keys)
        rest = [x for i, x in enumerate(t[2 * n :]) if 2 * n + i not in set(s.scored) | set(s.scored + 1)]
        assert set(rest) <= {"."}
    # power law: queries come early far more often than late
    pos = np.concatenate([s.scored for s in task.sample("train", 300, seed=2)]) - 2 * n
    space = (task.params["length"] - 2 * n) // 2
    assert np.mean(pos < space) > 0.6


def test_passkey_depth_uniform_and_lengths():
    task = task_of("passkey", MEDIUM)
    depths = [s.tokens.index("<key>") for s in task.sample("train", 2000, seed=1)]
    n_fill = 64 - 2 * 6
    assert min(depths) == 0 and max(depths) == n_fill
    assert abs(np.mean(depths) - n_fill / 2) < 1.5
    assert [g["length"] for g in task.eval_groups("ood-length")] == [128, 256]
    assert task.eval_groups("test") is None


# -- determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_determinism(name):
    task = task_of(name, MEDIUM)
    for split in task.splits:
        a = task.sample(split, 10, seed=42)
        b = task_of(name, MEDIUM).sample(split, 10, seed=42)
        assert all(np.array_equal(x.ids, y.ids) for x, y in zip(a, b))
        for i in (0, 7):  # sample i is the same drawn alone
            alone = task.sample(split, 1, seed=42, start=i)[0]
            assert np.array_equal(alone.ids, a[i].ids) and alone.index == i
        # different indices differ (MEDIUM's held-out split of a small automaton holds a few
        # strings per (segment count, label), so a repeat or three among 20 is chance, not a bug)
        assert len({tuple(x.ids.tolist()) for x in task.sample(split, 20, seed=42)}) >= 15
        other = task.sample(split, 10, seed=43)
        assert sum(np.array_equal(x.ids, y.ids) for x, y in zip(a, other)) <= 2


def test_no_global_numpy_state():
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    for name in NAMES:
        task_of(name).sample("train", 5, seed=0)
    assert np.array_equal(np.random.get_state()[1], before)


# -- train / held-out disjointness ----------------------------------------------------------
def _key(task, s: Sample) -> tuple:
    if task.name == "arithmetic":  # the input is the prompt
        return tuple(s.ids[: task.prompt_length(s)].tolist())
    return tuple(s.ids.tolist())


@pytest.mark.parametrize("name", NAMES)
def test_held_out_splits_never_share_an_input_with_train(name):
    task = task_of(name)
    train = [_key(task, s) for s in task.sample("train", 3000, seed=9)]
    assert len(set(train)) < len(train)  # the space is small: collisions would happen
    train = set(train)
    for split in task.splits:
        if split == "train":
            continue
        held = [_key(task, s) for s in task.sample(split, 300, seed=9)]
        assert not train & set(held), split
    # and without the partition the same space would collide: draw test-law samples as train
    if "test" in task.splits:
        same_law = {_key(task, s) for s in task.sample("train", 300, seed=10)}
        assert same_law & train


# -- bad input --------------------------------------------------------------------------------
BAD = [
    ("flipflop", dict(n_pairs=1), "n_pairs"),
    ("flipflop", dict(n_pairs=0), "n_pairs"),
    ("flipflop", dict(p_i=1.0), "p_i"),
    ("flipflop", dict(p_sparse=0), "p_sparse"),
    ("flipflop", dict(ood_len_pairs=1), "ood_len_pairs"),
    ("flipflop", dict(ood_len_pairs=256), "ood_len_pairs"),
    ("flipflop", dict(loss="bits"), "loss"),
    ("flipflop", dict(n_pairs="many"), "n_pairs"),
    ("selective_copy", dict(n_copy=0), "n_copy"),
    ("selective_copy", dict(n_blank=-1), "n_blank"),
    ("selective_copy", dict(n_data=0), "n_data"),
    ("selective_copy", dict(n_blank_dense=256), "n_blank_dense"),
    ("selective_copy", dict(n_blank_sparse=-3), "n_blank_sparse"),
    ("counting", dict(n_vars=0), "n_vars"),
    ("counting", dict(n_vars=27), "n_vars"),
    ("counting", dict(max_steps=2), "max_steps"),
    ("counting", dict(max_value=0), "max_value"),
    ("counting", dict(w_pass=0), "w_pass"),
    ("counting", dict(w_incr=-1), "w_incr"),
    ("arithmetic", dict(modulus=12), "modulus"),
    ("arithmetic", dict(modulus=1), "modulus"),
    ("arithmetic", dict(n_ops=0), "n_ops"),
    ("arithmetic", dict(min_ops=7), "min_ops"),
    ("arithmetic", dict(ood_ops_max=5), "ood_ops_max"),
    ("arithmetic", dict(ood_ops_max=-1), "ood_ops_max"),
    ("binfa", dict(n_sets=1), "n_sets"),
    ("binfa", dict(set_size=0), "set_size"),
    ("binfa", dict(density=0), "density"),
    ("binfa", dict(density=1.5), "density"),
    ("binfa", dict(density=1.0), "density"),  # every language saturates: no usable automaton
    ("binfa", dict(seg_len=0), "seg_len"),
    ("binfa", dict(max_segments=8, ood_max_segments=8), "ood_max_segments"),
    ("binfa", dict(automaton_seed=-1), "automaton_seed"),
    ("binfa", dict(trace="maybe"), "trace"),
    ("nfa", dict(n_sets=1, set_size=1), "n_sets"),
    ("nfa", dict(n_symbols=0), "n_symbols"),
    ("mqar", dict(n_kv=0), "n_kv"),
    ("mqar", dict(length=60, n_kv=16), "length"),
    ("mqar", dict(vocab_size=16, n_kv=8, length=64), "n_kv"),
    ("mqar", dict(vocab_size=2), "vocab_size"),
    ("mqar", dict(power_a=0), "power_a"),
    ("mqar", dict(ood_lengths="256"), "ood_lengths"),
    ("mqar", dict(ood_lengths="big"), "ood_lengths"),
    ("passkey", dict(length=0), "length"),
    ("passkey", dict(length=10, k_digits=5), "k_digits"),
    ("passkey", dict(k_digits=0), "k_digits"),
    ("passkey", dict(target_length=2048), "target_length"),
]


@pytest.mark.parametrize("name,params,word", BAD)
def test_bad_parameters_raise_value_error(name, params, word):
    with pytest.raises(ValueError, match=word):
        generators.get_task(name, **params)


@pytest.mark.parametrize("name", NAMES)
def test_bad_split_unknown_param_and_override(name):
    task = task_of(name)
    with pytest.raises(ValueError, match="split"):
        task.sample("validation", 1)
    with pytest.raises(ValueError, match="bogus"):
        generators.get_task(name, bogus=1)
    with pytest.raises(ValueError, match="cannot be overridden"):
        task.sample("train", 1, bogus=3)


# -- protocol details the trainer relies on ----------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_protocol_attributes(name):
    task = task_of(name)
    d = task.describe()
    assert d["metrics"][2:] and set(task.splits) >= {"train", "test"}
    assert any(s.startswith("ood") for s in task.splits)
    assert all(sep in task.vocab for sep in task.separators)
    assert len(set(task.vocab)) == len(task.vocab)
    assert task.scoring == ("greedy" if name == "arithmetic" else "next_token")
    for split in task.splits:
        for g in task.eval_groups(split) or []:
            s = task.sample(split, 2, seed=0, **g)
            for x in s:
                assert task.solve(x) == x.targets
                for k, v in g.items():
                    assert x.params[k] == v


def test_expected_separators():
    sep = {n: generators.get_task(n).separators for n in NAMES}
    assert sep["counting"] == (";",) and sep["arithmetic"] == ("=",) and sep["binfa"] == ("#",)
    assert sep["nfa"] == ("#",) and sep["selective_copy"] == ("|",) and sep["passkey"] == (".",)
    assert generators.get_task("flipflop").segment_starts == ("w",)


def test_selective_copy_blank_placement_uniform():
    """Data slots are a uniform n_copy-subset of the input: P(slot j holds data) = n / (n + b)."""
    task = generators.get_task("selective_copy", n_copy=4, n_blank=12, n_blank_dense=2, n_blank_sparse=20)
    inputs = np.stack([s.ids[:16] for s in task.sample("train", 3000, seed=1)])  # (N, 16)
    is_data = inputs < task.params["n_data"]
    assert np.all(is_data.sum(axis=1) == 4)
    assert np.all(np.abs(is_data.mean(axis=0) - 0.25) < 0.04)
    symbols = np.bincount(inputs[is_data], minlength=16) / is_data.sum()
    assert np.all(np.abs(symbols - 1 / 16) < 0.015)


@pytest.mark.parametrize("name", ["binfa", "nfa"])
def test_automaton_trace_mode(name):
    task = generators.get_task(name, **MEDIUM[name], trace=True)
    for split in task.splits:
        for s in task.sample(split, 150 if split != "test" else 40, seed=3):
            check_structure(task, s)
            assert [s.tokens[p] for p in s.scored] == ["#"] * s.tokens.count("#")
            assert s.tokens[-1] in ("Y", "N") and s.tokens[-2] == "#"
            assert task.solve(s) == s.targets
    # the final label of a traced string is the label of the same string without the trace
    plain = generators.get_task(name, **MEDIUM[name])
    for s in task.sample("train", 50, seed=4):
        stripped = [t for t in s.tokens if t not in ("Y", "N")] + [s.tokens[-1]]
        assert plain.solve(make_sample(plain, stripped)) == [s.tokens[-1]]


def _reference_counting_program(rng: np.random.Generator, n: int, nv: int, top: int, w: list[float]) -> tuple:
    """The paper's law read literally: statement by statement, redraw an impossible increment;
    redraw the whole n-statement program when it sets no variable."""
    while True:
        values: dict[int, int] = {}
        sets = incs = 0
        for _ in range(n):
            while True:
                kind = rng.choice(3, p=np.array(w) / sum(w))
                if kind == 0:
                    values[int(rng.integers(nv))] = 0
                    sets += 1
                elif kind == 1:
                    if not values:
                        continue
                    var = sorted(values)[int(rng.integers(len(values)))]
                    if values[var] >= top:
                        continue
                    values[var] += 1
                    incs += 1
                break
        if values:
            v = sorted(values)[int(rng.integers(len(values)))]
            return sets, incs, values[v]


def test_counting_matches_literal_law():
    """The vectorised generator (first set drawn from its truncated geometric law, candidate
    stream for the rest) has the law of the literal statement-by-statement sampler."""
    nv, top, w = 2, 2, [1.0, 7.0, 4.0]
    task = generators.get_task("counting", n_vars=nv, max_steps=5, max_value=top, w_set=w[0], w_incr=w[1], w_pass=w[2])
    # the generator's own law (Task.sample would also drop the 1/16 of this tiny program space
    # that the hash partition reserves for held-out splits)
    p = task.split_params("train")
    ours = Counter()
    for i in range(6000):
        ids, _, tgt = task.generate(example_rng(1, "train", i), p)
        toks = [task.vocab[t] for t in ids]
        body = " ".join(toks[:-3])
        ours[(toks.count(";"), body.count("= 0"), body.count("++"), int(task.vocab[tgt[0]]))] += 1
    rng = np.random.default_rng(0)
    ref = Counter()
    for _ in range(6000):
        n = int(rng.integers(3, 6))
        ref[(n, *_reference_counting_program(rng, n, nv, top, w))] += 1
    cells = set(ours) | set(ref)
    tv = 0.5 * sum(abs(ours[c] - ref[c]) for c in cells) / 6000
    assert tv < 0.06, tv
    assert max(abs(ours[c] - ref[c]) / 6000 for c in cells) < 0.015


@pytest.mark.parametrize("name", ["binfa", "nfa"])
@pytest.mark.parametrize("block_floats", [0, 1 << 21])  # plain tree product / 4-token block table
def test_automaton_simulation_paths_agree(name, block_floats, monkeypatch):
    """The final-label path (block table + tree product) and the per-segment path (prefix
    scan, used with trace=true) agree, with and without the block table, on ragged strings."""
    from synthlab.generators.binfa import _AutomatonTask

    monkeypatch.setattr(_AutomatonTask, "BLOCK_TABLE_FLOATS", block_floats)
    task = generators.get_task(name, seg_len=5, max_segments=7, ood_max_segments=9)
    assert task._block == (1 if block_floats == 0 else 4)
    rng = np.random.default_rng(0)
    for _ in range(40):
        sym, n_seg = task._draw_strings(rng, task.split_params("train"), 3)
        every = task._labels(sym, n_seg)
        assert np.array_equal(task._final_labels(sym, n_seg), every[np.arange(3), n_seg - 1])


def test_optional_parameter_accepts_none_but_required_ones_do_not():
    """CHE ``length`` defaults to None (drawn per split): passing None explicitly is the
    default; None for a parameter with a value default is a type error."""
    assert generators.get_task("parity_check", length=None).params == generators.get_task("parity_check").params
    assert generators.get_task("parity_check", length=12).params["length"] == 12
    with pytest.raises(ValueError, match="train_max_length"):
        generators.get_task("parity_check", train_max_length=None)
