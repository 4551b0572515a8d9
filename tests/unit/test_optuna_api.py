"""Optuna's private names: reached through synthlab.study.optuna_api only, under a version check
that agrees with pyproject.toml's optuna floor."""

from __future__ import annotations

import ast
import re
import tomllib
import warnings
from pathlib import Path

import pytest

from synthlab.study import optuna_api

ROOT = Path(__file__).resolve().parents[2]
# private names of Optuna objects synthlab has needed; only optuna_api may touch them
PRIVATE = {"_trial_id", "_study_id", "_storage", "_backend", "_file_path", "_lock_file", "_pop_waiting_trial_id"}


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in PRIVATE:  # getattr(x, "_trial_id")
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("optuna"):
            private = [p for p in node.module.split(".") if p.startswith("_")]
            private += [a.name for a in node.names if a.name.startswith("_")]
            if private:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import ...")
    return out


def test_no_module_but_optuna_api_touches_optuna_private_names():
    files = [p for p in (ROOT / "synthlab").rglob("*.py") if p.name != "optuna_api.py"]
    assert files
    offences = [o for p in files for o in _offences(p)]
    assert not offences, "go through synthlab.study.optuna_api:\n" + "\n".join(offences)


def test_the_scan_sees_an_offence():
    bad = ROOT / "synthlab" / "study" / "optuna_api.py"
    assert _offences(bad)  # the one module allowed: its names are seen


def test_tested_floor_is_pyprojects_floor():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(re.fullmatch(r"optuna>=(\d+)\.(\d+)", d) for d in deps if d.startswith("optuna"))
    assert floor is not None
    assert optuna_api.TESTED[0] == (int(floor.group(1)), int(floor.group(2)))


def test_installed_optuna_is_tested():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert optuna_api.check_version()


@pytest.mark.parametrize("version", ["4.2.0", "3.6.1", "6.0.0", "7.1.dev0"])
def test_untested_versions_warn(version):
    with pytest.warns(optuna_api.OptunaVersionWarning, match=re.escape(version)):
        assert not optuna_api.check_version(version)


@pytest.mark.parametrize("version", ["4.3.0", "4.6.0", "5.0.0", "5.9.1rc1"])
def test_tested_versions_pass(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert optuna_api.check_version(version)


def test_a_dropped_private_name_is_a_clear_error():
    with pytest.raises(optuna_api.OptunaAPIError, match="_trial_id"):
        optuna_api.trial_id(object())


def test_trial_id_of_a_real_trial():
    import optuna

    study = optuna.create_study()
    trial = study.ask()
    study.tell(trial, 1.0)
    frozen = study.get_trials()[0]
    assert optuna_api.trial_id(trial) == optuna_api.trial_id(frozen)
