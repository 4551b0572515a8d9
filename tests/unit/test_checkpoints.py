"""synthlab.run.checkpoints without training: the key, the settings, the lock, a bad checkpoint."""

import json

import pytest
import torch

from synthlab.run.checkpoints import DIRNAME, LAST, STATE, RunCheckpoints, run_key
from synthlab.run.training import resolve_config


def _cfg(**ov):
    return resolve_config("flipflop", "rope", "smoke", ov, probe=False)


def test_key_names_the_run_not_its_checkpoint_settings():
    base = run_key(_cfg())
    assert base == run_key(_cfg())
    assert base == run_key(_cfg(checkpoint_every=7, checkpoint_minutes=0.5, check_memory=False))
    assert base != run_key(_cfg(lr=1e-4))
    assert base != run_key(_cfg(seed=1))
    assert base != run_key(_cfg(), {"pe_revision": -1})


@pytest.mark.parametrize("key,value", [("checkpoint_every", -1), ("checkpoint_minutes", -0.5), ("steps", 10**9 + 1)])
def test_bad_settings_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        _cfg(**{key: value})


def test_nothing_without_an_output_directory_or_with_checkpoints_off(tmp_path):
    assert RunCheckpoints.open(None, _cfg()) is None
    assert RunCheckpoints.open(tmp_path, _cfg(checkpoint_every=0, checkpoint_minutes=0)) is None
    assert not (tmp_path / DIRNAME).exists()


class _Trainer:
    """What RunCheckpoints.save needs of a Lightning Trainer."""

    def __init__(self, step):
        self.global_step = step

    def save_checkpoint(self, path):
        torch.save({"global_step": self.global_step}, path)


def test_nothing_is_written_before_the_first_save(tmp_path):
    ck = RunCheckpoints.open(tmp_path, _cfg())
    ck.begin("run-0")
    ck.finish()
    assert list(tmp_path.iterdir()) == []


def test_a_second_live_holder_saves_nothing_and_the_run_id_is_kept(tmp_path):
    cfg = _cfg(steps=20)
    ck = RunCheckpoints.open(tmp_path, cfg)
    assert ck is not None and ck.run_id is None and not ck.resuming
    ck.begin("run-1")
    ck.save(_Trainer(5))
    with pytest.warns(UserWarning, match="in use"):
        assert RunCheckpoints.open(tmp_path, cfg) is None
    ck.release()  # Ctrl-C: the files stay
    again = RunCheckpoints.open(tmp_path, cfg)
    assert again.run_id == "run-1" and again.resuming and again.resume_step == 5
    again.finish()
    assert not (tmp_path / DIRNAME).exists()


def test_two_fresh_runs_of_one_key_one_saves(tmp_path):
    cfg = _cfg(steps=20)
    a, b = RunCheckpoints.open(tmp_path, cfg), RunCheckpoints.open(tmp_path, cfg)
    a.begin("a")
    b.begin("b")
    a.save(_Trainer(5))
    with pytest.warns(UserWarning, match="in use"):
        b.save(_Trainer(5))
    b.finish()  # not its directory: left alone
    assert json.loads((a.dir / STATE).read_text())["run_id"] == "a"
    a.finish()
    assert not (tmp_path / DIRNAME).exists()


def _left_behind(tmp_path, cfg, run_id, write):
    ck = RunCheckpoints.open(tmp_path, cfg)
    ck.begin(run_id)
    ck.save(_Trainer(5))
    write(ck.path)
    ck.release()


def test_an_unreadable_checkpoint_is_dropped_with_a_warning(tmp_path):
    cfg = _cfg(steps=20)
    _left_behind(tmp_path, cfg, "run-2", lambda p: p.write_bytes(b"not a checkpoint"))
    with pytest.warns(UserWarning, match="starting over"):
        again = RunCheckpoints.open(tmp_path, cfg)
    assert again.run_id == "run-2" and not again.resuming and not again.path.exists()
    again.release()


def test_a_checkpoint_with_pickled_objects_is_not_loaded(tmp_path):
    """weights_only: a checkpoint holding an arbitrary object is refused, not unpickled."""
    cfg = _cfg(steps=20)
    _left_behind(tmp_path, cfg, "run-3", lambda p: torch.save({"global_step": 5, "payload": _Evil()}, p))
    with pytest.warns(UserWarning, match="starting over"):
        again = RunCheckpoints.open(tmp_path, cfg)
    assert not again.resuming and again.run_id == "run-3" and LAST == again.path.name
    again.release()


def test_a_checkpoint_past_the_run_is_not_resumed(tmp_path):
    cfg = _cfg(steps=20)
    _left_behind(tmp_path, cfg, "run-4", lambda p: torch.save({"global_step": 20}, p))
    with pytest.warns(UserWarning, match="starting over"):
        assert not RunCheckpoints.open(tmp_path, cfg).resuming


class _Evil:
    pass


def test_a_resumed_attempt_keeps_its_run_ids_and_removes_what_it_left(tmp_path):
    cfg = _cfg(steps=20)
    ck = RunCheckpoints.open(tmp_path, cfg)
    assert ck.run_ids(["a", "b"]) == ["a", "b"]  # fresh: the ids handed in
    ck.save(_Trainer(5))
    ck.release()  # killed
    (tmp_path / "a").mkdir()  # the killed attempt's half-made run directory
    (tmp_path / "other").mkdir()
    again = RunCheckpoints.open(tmp_path, cfg)
    assert again.resuming and again.run_ids(["c", "d"]) == ["a", "b"]
    assert not (tmp_path / "a").exists() and (tmp_path / "other").is_dir()
    again.release()
    # another count of seeds is another run: fresh ids, nothing removed
    third = RunCheckpoints.open(tmp_path, cfg)
    assert third.run_ids(["e"]) == ["e"] and (tmp_path / "other").is_dir()
    third.finish()


@pytest.mark.parametrize("ids", [["run-7"], ["run-7", "run-8"]])
def test_an_attempt_whose_records_were_written_is_not_resumed(tmp_path, ids):
    cfg = _cfg(steps=20)
    ck = RunCheckpoints.open(tmp_path, cfg)
    ck.run_ids(ids)
    ck.save(_Trainer(5))
    ck.release()  # killed between the first record and the checkpoint's removal
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"run_id": ids[0]}) + "\n")
    unnamed = RunCheckpoints.open(tmp_path, cfg)
    assert unnamed.resuming  # no results named: it resumes
    unnamed.release()
    fresh = RunCheckpoints.open(tmp_path, cfg, results=results)
    assert fresh is not None and not fresh.resuming and fresh.run_id is None
    assert not (tmp_path / DIRNAME).exists()  # the recorded attempt's checkpoint is gone
    assert fresh.run_ids(["new"] * len(ids)) == ["new"] * len(ids)
    fresh.finish()
