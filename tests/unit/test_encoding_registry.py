"""The table of encodings: each encoding is one row plus one module that builds itself;
the model is built from the rows alone, with the state-dict keys, shapes and random
initialisation of the models built before the table drove it (old runs load, seeds repeat)."""

from __future__ import annotations

import inspect

import pytest
import torch

from synthlab.model import COMPONENTS, parse_pe, register, transformer
from synthlab.model.registry import ROLES, Encoding, builder, names_of
from synthlab.model.transformer import Transformer

# the position modules' state-dict keys and shapes (d_model=32, n_heads=4, n_layers=2, max_len=64),
# and sum_i (i + 1) |p_i|_1 over the parameters in order after torch.manual_seed(0): a fingerprint of
# the initialisation (values and order of creation); values from the model before the table
SNAPSHOT = [
    ("cope+rope", 2, {"blocks.0.attn.cope.pos_emb": (8, 64), "blocks.1.attn.cope.pos_emb": (8, 64)}, 7216.382954),
    ("cope", 1, {"blocks.0.attn.cope.pos_emb": (8, 64), "blocks.1.attn.cope.pos_emb": (8, 64)}, 7382.985626),
    (
        "t5",
        2,
        {"blocks.0.attn.biases.0.table.weight": (32, 4), "blocks.1.attn.biases.0.table.weight": (32, 4)},
        7225.704742,
    ),
    (
        "t5:layer_tables=1",
        2,
        {"blocks.0.attn.biases.0.table.weight": (32, 4), "blocks.1.attn.biases.0.table.weight": (32, 4)},
        7429.615227,
    ),
    (
        "bipe-alibi+dape:k=3",
        2,
        {
            "abs_enc.table.weight": (64, 32),
            "blocks.0.attn.dape.conv1.weight": (32, 8, 1, 3),
            "blocks.0.attn.dape.conv1.bias": (32,),
            "blocks.0.attn.dape.conv2.weight": (4, 32, 1, 3),
            "blocks.0.attn.dape.conv2.bias": (4,),
            "blocks.1.attn.dape.conv1.weight": (32, 8, 1, 3),
            "blocks.1.attn.dape.conv1.bias": (32,),
            "blocks.1.attn.dape.conv2.weight": (4, 32, 1, 3),
            "blocks.1.attn.dape.conv2.bias": (4,),
        },
        13171.312809,
    ),
    (
        "fire+dape",
        2,
        {
            "blocks.0.attn.biases.0.mlp.0.weight": (32, 1),
            "blocks.0.attn.biases.0.mlp.0.bias": (32,),
            "blocks.0.attn.biases.0.mlp.2.weight": (4, 32),
            "blocks.0.attn.biases.0.mlp.2.bias": (4,),
            "blocks.0.attn.biases.0.c": (),
            "blocks.0.attn.biases.0.L_multiplier": (),
            "blocks.0.attn.dape.conv1.weight": (32, 8, 1, 1),
            "blocks.0.attn.dape.conv1.bias": (32,),
            "blocks.0.attn.dape.conv2.weight": (4, 32, 1, 1),
            "blocks.0.attn.dape.conv2.bias": (4,),
            "blocks.1.attn.biases.0.mlp.0.weight": (32, 1),
            "blocks.1.attn.biases.0.mlp.0.bias": (32,),
            "blocks.1.attn.biases.0.mlp.2.weight": (4, 32),
            "blocks.1.attn.biases.0.mlp.2.bias": (4,),
            "blocks.1.attn.biases.0.c": (),
            "blocks.1.attn.biases.0.L_multiplier": (),
            "blocks.1.attn.dape.conv1.weight": (32, 8, 1, 1),
            "blocks.1.attn.dape.conv1.bias": (32,),
            "blocks.1.attn.dape.conv2.weight": (4, 32, 1, 1),
            "blocks.1.attn.dape.conv2.bias": (4,),
        },
        17375.004371,
    ),
    (
        "kerple:kind=power",
        2,
        {
            "blocks.0.attn.biases.0.a": (4,),
            "blocks.0.attn.biases.0.p": (4,),
            "blocks.1.attn.biases.0.a": (4,),
            "blocks.1.attn.biases.0.p": (4,),
        },
        8147.040650,
    ),
    (
        "relative-capped",
        2,
        {"blocks.0.attn.biases.0.table": (64, 8), "blocks.1.attn.biases.0.table": (64, 8)},
        7613.525920,
    ),
    (
        "cope-alibi:sep_keys=1",
        2,
        {"blocks.0.attn.cope.gate_key.weight": (32, 32), "blocks.1.attn.cope.gate_key.weight": (32, 32)},
        7854.560719,
    ),
    ("learned", 2, {"abs_enc.table.weight": (64, 32)}, 7389.115029),
    ("sinusoidal+xpos", 2, {}, 6830.694005),
    (
        "nope+dape",
        2,
        {
            "blocks.0.attn.dape.conv1.weight": (32, 4, 1, 1),
            "blocks.0.attn.dape.conv1.bias": (32,),
            "blocks.0.attn.dape.conv2.weight": (4, 32, 1, 1),
            "blocks.0.attn.dape.conv2.bias": (4,),
            "blocks.1.attn.dape.conv1.weight": (32, 4, 1, 1),
            "blocks.1.attn.dape.conv1.bias": (32,),
            "blocks.1.attn.dape.conv2.weight": (4, 32, 1, 1),
            "blocks.1.attn.dape.conv2.bias": (4,),
        },
        10795.460020,
    ),
]
_COMMON = ("wte.", "ln_", "lm_head", ".mlp.c_", ".attn.c_attn", ".attn.c_proj")  # what every model has


def _build(spec: str, revision: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(parse_pe(spec), vocab_size=11, d_model=32, n_layers=2, n_heads=4, max_len=64, revision=revision)


@pytest.mark.parametrize("spec,revision,keys,fingerprint", SNAPSHOT, ids=[f"{s[0]}-r{s[1]}" for s in SNAPSHOT])
def test_state_dict_keys_shapes_and_initialisation_unchanged(spec, revision, keys, fingerprint):
    m = _build(spec, revision)
    got = {k: tuple(v.shape) for k, v in m.state_dict().items() if not any(c in k for c in _COMMON)}
    assert got == keys
    with torch.no_grad():
        fp = sum((i + 1) * float(p.double().abs().sum()) for i, p in enumerate(m.parameters()))
    assert fp == pytest.approx(fingerprint, rel=1e-9, abs=1e-5)


def test_shared_tables_follow_revision_and_layer_tables():
    a = _build("t5", 2).blocks
    assert a[0].attn.biases[0] is a[1].attn.biases[0]
    b = _build("t5:layer_tables=1", 2).blocks
    assert b[0].attn.biases[0] is not b[1].attn.biases[0]
    c = _build("cope+rope", 2).blocks
    assert c[0].attn.cope.pos_emb is c[1].attn.cope.pos_emb
    d = _build("cope", 1).blocks
    assert d[0].attn.cope.pos_emb is not d[1].attn.cope.pos_emb


def test_every_row_names_its_kind_index_and_builder():
    for name, row in COMPONENTS.items():
        assert row.kind in ROLES, name
        if row.alias is not None:  # a shorthand resolves to another row
            assert row.alias[0] in COMPONENTS and COMPONENTS[row.alias[0]].alias is None
            continue
        for part in row.parts:
            assert part.index in ("token", "segment", "intra", None)
            assert callable(getattr(builder(part), "build", None)), name
            assert inspect.getdoc(builder(part)), name  # formula and paper live in the class docstring
    assert names_of("rotary") == ["rope", "xpos", "bipe-rope"]
    assert parse_pe("bipe-alibi").rotary is False and parse_pe("bipe-rope").rotary and parse_pe("bipe-rope").bipe


def test_model_code_tests_no_encoding_names():
    """The transformer is built from the rows: no encoding name appears in its code as a string
    (SLOTS names Attention's attributes, "cope" / "dape", kept for the state-dict keys)."""
    src = "".join(
        inspect.getsource(f)
        for f in (
            transformer.Transformer,
            transformer._build_configs,
            transformer._shared_components,
            transformer._layer_components,
        )
    )
    for name in COMPONENTS:
        assert f'"{name}"' not in src and f"'{name}'" not in src, name


@pytest.mark.parametrize(
    "row,needle",
    [
        (Encoding("rope", "rotary", "d", "p", build="encoders.rotary:Rotary"), "already registered"),
        (Encoding("My+PE", "bias", "d", "p", build="encoders.bias:ALiBi"), "lower case"),
        (Encoding("toy-x", "scalar", "d", "p", build="encoders.bias:ALiBi"), "kind"),
        (Encoding("toy-x", "bias", "d", "p"), "no builder"),
        (Encoding("toy-x", "bias", "d", "p", build="encoders.bias:ALiBi", checks={"k": None}), "does not have"),
    ],
)
def test_register_rejects_malformed_rows(row, needle):
    with pytest.raises(ValueError, match=needle):
        register(row)
    assert "toy-x" not in COMPONENTS


def test_causal_only_names_the_parts():
    assert parse_pe("dape").causal_only is False and parse_pe("kerple+dape:k=3").causal_only is False
    assert parse_pe("cope+dape:k=3").causal_only_parts == ["cope"]
    assert parse_pe("cope+xpos").causal_only_parts == ["cope", "xpos"]
    assert parse_pe("cope-alibi").causal_only_parts == ["cope-alibi"]
