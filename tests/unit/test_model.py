"""The Transformer: shapes, attention maps, fast path == materialised path, inputs, determinism."""

from __future__ import annotations

import pytest
import torch

from synthlab.model import build_model, parse_pe

pytestmark = pytest.mark.usefixtures("one_thread")


V = 13


def _tiny(pe="rope", **kw):
    torch.manual_seed(0)
    return build_model(pe=pe, vocab_size=V, **{"d_model": 32, "n_layers": 3, "n_heads": 4, "max_len": 64, **kw})


def test_contract_shapes_and_attention():
    m = _tiny()
    x = torch.randint(0, V, (3, 17))
    logits = m(x)
    assert logits.shape == (3, 17, V)
    logits2, att = m(x, return_attention=True)
    assert torch.allclose(logits, logits2, atol=1e-5)  # SDPA fast path == materialised path
    assert isinstance(att, list) and len(att) == 3
    for a in att:
        assert a.shape == (3, 4, 17, 17)
        assert torch.allclose(a.sum(-1), torch.ones(3, 4, 17), atol=1e-5)
        assert torch.all(a.triu(1) == 0)


@pytest.mark.parametrize(
    "pe", ["nope", "alibi", "t5", "kerple", "fire", "relative", "sinusoidal", "learned", "xpos", "bipe-alibi"]
)
def test_fast_path_equals_materialised(pe):
    m = _tiny(pe, separator_ids=(1,)).eval()
    x = torch.randint(0, V, (2, 20))
    a = m(x)
    b, _ = m(x, return_attention=True)
    assert torch.allclose(a, b, atol=1e-5)


def test_tied_embeddings_and_param_count():
    m = _tiny(tie_embeddings=True)
    assert m.lm_head.weight is m.wte.weight
    untied = _tiny(tie_embeddings=False)
    assert untied.num_params() - m.num_params() == V * 32


def test_positions_argument_shapes():
    m = _tiny("rope")
    x = torch.randint(0, V, (2, 8))
    default = m(x)
    assert torch.allclose(m(x, positions=torch.arange(8)), default, atol=1e-6)
    assert torch.allclose(m(x, positions=torch.arange(8).expand(2, 8)), default, atol=1e-6)
    per_row = torch.stack([torch.arange(8), torch.arange(8) * 3])
    out = m(x, positions=per_row)
    assert torch.allclose(out[0], default[0], atol=1e-6) and not torch.allclose(out[1], default[1], atol=1e-6)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda m: m(torch.zeros(4, dtype=torch.long)), "tokens"),
        (lambda m: m(torch.zeros(1, 4, dtype=torch.long), positions=torch.arange(5)), "positions"),
        (lambda m: m(torch.zeros(1, 4, dtype=torch.long), positions=torch.arange(4.0)), "integer"),
        (lambda m: m(torch.zeros(1, 4, dtype=torch.long), positions=torch.tensor([-1, 0, 1, 2])), "non-negative"),
    ],
)
def test_bad_forward_inputs(call, needle):
    with pytest.raises(ValueError, match=needle):
        call(_tiny())


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"d_model": 30, "n_heads": 4}, "divisible"),
        ({"n_layers": 0}, "n_layers"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"dropout": 1.5}, "dropout"),
        ({"d_model": 12, "n_heads": 4}, "even head dim"),
    ],
)
def test_bad_model_sizes(kw, needle):
    with pytest.raises(ValueError, match=needle):
        build_model(pe="rope", **{"vocab_size": V, **kw})


def test_deterministic_given_seed():
    x = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(0))
    for pe in ("cope", "kerple+dape:k=3", "fire"):
        a, b = _tiny(pe)(x), _tiny(pe)(x)
        assert torch.equal(a, b)


def test_dropout_only_in_training():
    m = _tiny("alibi", dropout=0.5)
    x = torch.randint(0, V, (2, 10))
    m.train()
    assert not torch.equal(m(x), m(x))
    m.eval()
    assert torch.equal(m(x), m(x))


def test_backward_reaches_position_parameters():
    for pe, names in [
        ("t5", ["table"]),
        ("kerple", ["r1", "r2"]),
        ("fire", ["mlp", ".c", ".L"]),
        ("cope", ["pos_emb"]),
        ("kerple+dape:k=3", ["conv1", "conv2"]),
        ("relative", ["table"]),
        ("learned", ["abs_enc"]),
        ("bipe-rope", ["abs_enc"]),
    ]:
        m = _tiny(pe)
        x = torch.randint(0, V, (2, 12))
        m(x).square().mean().backward()
        hit = [
            n
            for n, p in m.named_parameters()
            if any(s in n for s in names) and p.grad is not None and p.grad.abs().sum() > 0
        ]
        assert hit, f"{pe}: no gradient reaches {names}"


def test_spec_object_and_string_build_the_same():
    spec = parse_pe("kerple+dape:k=3")
    torch.manual_seed(0)
    a = build_model(pe=spec, vocab_size=V)
    torch.manual_seed(0)
    b = build_model(pe="kerple+dape:k=3", vocab_size=V)
    x = torch.randint(0, V, (1, 9))
    assert torch.equal(a(x), b(x)) and a.pe == "kerple+dape:k=3"


def test_encodings_command_lists_everything(capsys):
    import argparse

    from synthlab.commands import encodings
    from synthlab.model import ENCODINGS, INDEX_SCHEMES

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    encodings.add_parser(sub)
    assert encodings.run(parser.parse_args(["encodings"])) == 0
    out = capsys.readouterr().out.splitlines()
    for name, (_, paper) in {**ENCODINGS, **INDEX_SCHEMES}.items():
        line = next(ln for ln in out if ln.split("  ")[0].strip() == name)
        assert paper.split(",")[0] in line
    assert encodings.run(parser.parse_args(["encodings", "--json"])) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= set(ENCODINGS) | {"pose", "randomized"}


def test_length_cache_is_bounded_and_reused():
    from synthlab.model.cache import TensorCache

    cache = TensorCache(max_bytes=1000)
    a = cache.get("a", lambda: torch.zeros(100))  # 400 bytes
    assert cache.get("a", lambda: torch.ones(100)) is a
    cache.get("b", lambda: torch.zeros(100))
    cache.get("c", lambda: torch.zeros(100))  # 1200 bytes > 1000: "a" (least recent) goes
    assert len(cache) == 2 and cache.get("a", lambda: torch.ones(1)).numel() == 1
    m = _tiny("alibi")
    for T in range(2, 40):
        m(torch.zeros(1, T, dtype=torch.long))
    assert m._cache._bytes <= m._cache.max_bytes


def test_tune_cpu_allocator_is_idempotent():
    import sys

    from synthlab.model import tune_cpu_allocator

    first = tune_cpu_allocator()
    assert tune_cpu_allocator() == first
    if sys.platform.startswith("linux"):
        assert first is True


@pytest.mark.parametrize("pe", ["alibi", "rope", "t5", "relative", "kerple"])
def test_fast_path_and_materialised_path_have_the_same_gradients(pe):
    x = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(0))
    m = _tiny(pe)
    m(x).square().mean().backward()
    fast = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x, return_attention=True)[0].square().mean().backward()
    for a, (name, p) in zip(fast, m.named_parameters()):
        assert torch.allclose(a, p.grad, atol=1e-6), name
