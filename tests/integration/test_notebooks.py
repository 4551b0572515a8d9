"""Notebooks run top to bottom on the public API (smoke preset, seconds)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.setenv("SYNTHLAB_NOTEBOOK_PRESET", "smoke")
    monkeypatch.setenv("SYNTHLAB_NOTEBOOK_OUT", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    nb = json.loads(path.read_text())
    namespace: dict = {"__name__": "__main__"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
    assert any((tmp_path / "runs").glob("*/model.safetensors"))


def test_notebooks_exist_and_use_public_api_only():
    assert NOTEBOOKS, "notebooks/ is empty"
    for path in NOTEBOOKS:
        src = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        assert "synthlab._" not in src and "from synthlab." not in src, f"{path.name} uses private modules"
