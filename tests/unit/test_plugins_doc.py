"""docs/plugins.md's example plugin works as written: its three Python files (each code block
that starts with a ``# synthlab_reverse/<file>.py`` line) are written out as a package, their task
and row registered as their entry points would be, and held to what the doc promises."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from synthlab import generators
from synthlab.model import build_model, parse_pe
from synthlab.model.registry import register, unregister

DOC = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(python|toml)\n(.*?)```", DOC, re.S)


@pytest.fixture
def reverse_pkg(tmp_path, monkeypatch):
    files = {
        m.group(1): code
        for lang, code in BLOCKS
        if lang == "python"
        for m in [re.match(r"# synthlab_reverse/(\w+\.py)", code)]
        if m
    }
    assert set(files) == {"__init__.py", "task.py", "bias.py"}
    pkg = tmp_path / "synthlab_reverse"
    pkg.mkdir()
    for name, code in files.items():
        (pkg / name).write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    import synthlab_reverse
    from synthlab_reverse.task import Reverse

    # the doc's pyproject names exactly these objects under these names
    (toml,) = [code for lang, code in BLOCKS if lang == "toml"]
    eps = tomllib.loads(toml)["project"]["entry-points"]
    assert eps["synthlab.tasks"] == {"reverse": "synthlab_reverse.task:Reverse"}
    assert eps["synthlab.encodings"] == {"linear-bias": "synthlab_reverse:LINEAR_BIAS"}
    generators.register(Reverse)
    register(synthlab_reverse.LINEAR_BIAS)
    yield
    generators.unregister("reverse")
    unregister("linear-bias")


def test_the_docs_example_plugin_works(reverse_pkg):
    import torch

    task = generators.get_task("reverse", n=4)
    for split in task.splits:
        for s in task.sample(split, 50, seed=1):
            assert task.solve(s) == s.targets
    assert parse_pe("linear-bias:w0=0.5+dape:k=3").name == "linear-bias:w0=0.5+dape:k=3"
    with pytest.raises(ValueError, match="positive"):
        parse_pe("linear-bias:w0=0")
    torch.manual_seed(0)
    m = build_model(pe="linear-bias+dape", vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2, max_len=32)
    logits = m(torch.randint(0, task.vocab_size, (2, 9)))
    assert logits.shape == (2, 9, task.vocab_size) and torch.isfinite(logits).all()
