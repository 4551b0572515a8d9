"""Plugins: the lazily loading registry behind generators.TASKS and the encoding
table, and the demo plugin of tests/plugin_pkg held to the contract the built-ins meet (its task
to the generator contract of test_generators.py, its encoding to test_toy_encoding.py's).
tests/system/test_plugins.py installs that package and runs synthlab with it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from synthlab import generators
from synthlab.generators.plugins import PluginRegistry
from synthlab.model import registry

PLUGIN_PKG = Path(__file__).resolve().parents[1] / "plugin_pkg"


def _ep(name: str, load, dist: str | None = "demo-dist 1.2"):
    """An entry point as the loader reads one: name, value, dist, load()."""
    d = None if dist is None else SimpleNamespace(name=dist.split()[0], version=dist.split()[1])
    return SimpleNamespace(name=name, value=f"demo_module:{name}", dist=d, load=load)


def _raise(exc: Exception):
    def load():
        raise exc

    return load


def _registry(eps, calls: list | None = None) -> PluginRegistry:
    def discover(group):
        if calls is not None:
            calls.append(group)
        return eps

    def adopt(name, obj):
        if not isinstance(obj, int):
            raise TypeError(f"the entry point names {obj!r}, not an int")
        if name in reg:
            raise ValueError(f"{name!r} is already registered")
        reg[name] = obj

    reg = PluginRegistry("demo.group", "number", {"one": 1}, adopt=adopt, discover=discover)
    return reg


def test_entry_points_load_once_on_the_first_read_and_writes_do_not_load():
    calls: list[str] = []
    reg = _registry([_ep("two", lambda: 2)], calls)
    reg["zero"] = 0  # a write (register() of a built-in) reads no metadata
    assert calls == []
    assert "two" in reg and calls == ["demo.group"]
    assert list(reg) == ["one", "zero", "two"] and reg["two"] == 2 and len(reg) == 3
    assert reg.origin("two") == "demo-dist 1.2" and reg.origin("one") is None
    assert calls == ["demo.group"]  # once
    del reg["two"]
    assert "two" not in reg and reg.origin("two") is None


def test_a_broken_plugin_is_skipped_with_one_warning_line(capsys):
    reg = _registry(
        [
            _ep("missing", _raise(ModuleNotFoundError("No module named 'demo_module'"))),
            _ep("crashes", _raise(RuntimeError("boom\n  at import time"))),
            _ep("wrong", lambda: "two"),
            _ep("one", lambda: 11, dist=None),  # clashes with the built-in
            _ep("three", lambda: 3),
        ]
    )
    assert dict(reg) == {"one": 1, "three": 3}
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "synthlab: warning: number plugin 'missing' (demo-dist 1.2, demo_module:missing) skipped: "
        "ModuleNotFoundError: No module named 'demo_module'",
        "synthlab: warning: number plugin 'crashes' (demo-dist 1.2, demo_module:crashes) skipped: "
        "RuntimeError: boom at import time",
        "synthlab: warning: number plugin 'wrong' (demo-dist 1.2, demo_module:wrong) skipped: "
        "TypeError: the entry point names 'two', not an int",
        "synthlab: warning: number plugin 'one' (unknown distribution, demo_module:one) skipped: "
        "ValueError: 'one' is already registered",
    ]
    assert reg.origin("three") == "demo-dist 1.2" and reg.origin("one") is None


def test_unreadable_metadata_leaves_the_built_ins(capsys):
    def discover(group):
        raise OSError("permission denied")

    reg = PluginRegistry("demo.group", "number", {"one": 1}, adopt=lambda n, o: None, discover=discover)
    assert dict(reg) == {"one": 1}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "cannot read entry points 'demo.group'" in err[0] and "permission denied" in err[0]


def test_a_second_thread_waits_for_the_whole_load():
    def slow():
        time.sleep(0.2)
        return 2

    reg = _registry([_ep("two", slow)])
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(len(reg))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [2, 2, 2, 2]


def test_the_real_registries_are_plugin_registries():
    assert isinstance(generators.TASKS, PluginRegistry) and generators.TASKS.group == "synthlab.tasks"
    assert isinstance(registry.COMPONENTS, PluginRegistry) and registry.COMPONENTS.group == "synthlab.encodings"
    assert registry.ENCODINGS["rope"] == (registry.COMPONENTS["rope"].description, registry.COMPONENTS["rope"].paper)
    assert list(registry.ENCODINGS) == list(registry.COMPONENTS)


# ---- the demo plugin meets the built-ins' contract ------------------------------------------


@pytest.fixture
def demo(monkeypatch):
    """The demo plugin's task and encoding, registered in this process as its entry points would."""
    monkeypatch.syspath_prepend(str(PLUGIN_PKG))
    import synthlab_plugin_demo
    from synthlab_plugin_demo.task import Reverse

    generators.register(Reverse)
    registry.register(synthlab_plugin_demo.PLUGIN_PE)
    yield Reverse.name, synthlab_plugin_demo.PLUGIN_PE.name
    generators.unregister(Reverse.name)
    registry.unregister(synthlab_plugin_demo.PLUGIN_PE.name)


def _check_structure(task, s) -> None:
    """test_generators.check_structure, for a next-token task."""
    assert s.ids.dtype == np.int64 and s.ids.ndim == 1
    assert s.ids.min() >= 0 and s.ids.max() < len(task.vocab)
    assert len(s.scored) == len(s.target_ids) >= 1 and np.all(np.diff(s.scored) > 0)
    assert np.array_equal(s.target_ids, s.ids[s.scored + 1])
    rec = s.to_record()
    json.dumps(rec)
    assert rec["tokens"] == s.tokens and rec["targets"] == s.targets


def test_demo_task_meets_the_generator_contract(demo):
    name, _ = demo
    task = generators.get_task(name, n=3, ood_n=5)
    assert set(task.splits) >= {"train", "test"} and any(s.startswith("ood") for s in task.splits)
    assert all(sep in task.vocab for sep in task.separators) and len(set(task.vocab)) == len(task.vocab)
    for split in task.splits:
        samples = task.sample(split, 300, seed=3)
        for s in samples:
            _check_structure(task, s)
            assert task.solve(s) == s.targets, " ".join(s.tokens)
        # deterministic and addressable: the same seed gives the same bytes, sample i alone is sample i
        again = generators.get_task(name, n=3, ood_n=5).sample(split, 300, seed=3)
        assert all(np.array_equal(a.ids, b.ids) for a, b in zip(samples, again))
        assert np.array_equal(task.sample(split, 1, seed=3, start=17)[0].ids, samples[17].ids)
    # held-out: test never shares an input with train (3 digits: 125 inputs, train collides)
    train = [tuple(s.ids.tolist()) for s in task.sample("train", 2000, seed=9)]
    assert len(set(train)) < len(train)
    assert not set(train) & {tuple(s.ids.tolist()) for s in task.sample("test", 300, seed=9)}
    # bad input: ValueError naming the parameter or split
    with pytest.raises(ValueError, match="ood_n"):
        generators.get_task(name, n=4, ood_n=4)
    with pytest.raises(ValueError, match="'n'"):
        generators.get_task(name, n=0)
    with pytest.raises(ValueError, match="split"):
        task.sample("validation", 1)


def test_demo_encoding_parses_builds_from_its_lazy_path_and_runs(demo):
    import torch

    _, pe = demo
    assert registry.parse_pe(f"dape+{pe}:w0=0.5").name == f"{pe}:w0=0.5+dape"
    with pytest.raises(ValueError, match="positive"):
        registry.parse_pe(f"{pe}:w0=0")
    torch.manual_seed(0)
    from synthlab.model import build_model

    m = build_model(pe=f"{pe}+dape:k=3", vocab_size=6, d_model=16, n_layers=2, n_heads=2, max_len=32)
    assert type(m.blocks[1].attn.biases[0]).__module__ == "synthlab_plugin_demo.bias"
    logits = m(torch.randint(0, 6, (2, 9)))
    assert logits.shape == (2, 9, 6) and torch.isfinite(logits).all()
