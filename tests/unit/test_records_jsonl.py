"""results.jsonl through the jsonlines package: the same bytes as before, one write per record,
torn lines skipped, never NaN."""

from __future__ import annotations

import json
import os

import jsonlines
import pytest

from synthlab.run import records

REC = {
    "schema": 1,
    "run_id": "r1",
    "task": "flipflop",
    "pe": "rope",
    "status": "ok",
    "error": "naïve ✓",
    "metrics": {"test": {"token_acc": float("nan"), "seq_acc": 0.5}},
    "train": {"lr": 1e-3, "seed": 2},
}


def _old_line(rec, ensure_ascii=False) -> bytes:
    """The line the writer produced before jsonlines (the bytes must not change)."""
    return (json.dumps(records.clean(rec), allow_nan=False, ensure_ascii=ensure_ascii) + "\n").encode()


def test_append_writes_the_same_bytes_with_one_fsynced_write_per_record(tmp_path, monkeypatch):
    calls = {"write": [], "fsync": 0, "jsonlines": 0}
    real_write, real_fsync, real_writer = os.write, os.fsync, jsonlines.Writer

    def write(fd, data):
        calls["write"].append(bytes(data))
        return real_write(fd, data)

    def fsync(fd):
        calls["fsync"] += 1
        return real_fsync(fd)

    class Writer(real_writer):
        def write(self, obj):
            calls["jsonlines"] += 1
            return super().write(obj)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(jsonlines, "Writer", Writer)
    path = tmp_path / "sub" / "results.jsonl"
    records.append_record(path, REC)
    records.append_record(path, REC, ensure_ascii=True)
    assert path.read_bytes() == _old_line(REC) + _old_line(REC, ensure_ascii=True)
    assert calls["write"] == [_old_line(REC), _old_line(REC, ensure_ascii=True)]  # whole lines, one call each
    assert calls["fsync"] == 2 and calls["jsonlines"] == 2
    assert b"NaN" not in path.read_bytes() and json.loads(path.read_text().splitlines()[0])["metrics"]["test"] == {
        "token_acc": None,
        "seq_acc": 0.5,
    }


def test_write_records_is_byte_identical_to_the_old_writer(tmp_path):
    recs = [REC, {**REC, "run_id": "r2"}]
    records.write_records(tmp_path / "study-results.jsonl", recs)
    assert (tmp_path / "study-results.jsonl").read_bytes() == b"".join(_old_line(r, ensure_ascii=True) for r in recs)
    assert [p.name for p in tmp_path.iterdir()] == ["study-results.jsonl"]  # no temporary file left


@pytest.mark.parametrize("tail", ['{"schema": 1, "run_id": "torn", "ta', "null", "[1, 2]", "\x1e"])
def test_readers_skip_a_torn_or_foreign_last_line_and_repair_ends_it(tmp_path, tail):
    path = tmp_path / "results.jsonl"
    records.append_record(path, REC)
    with open(path, "a", encoding="utf-8") as f:
        f.write(tail)  # a kill mid-write (or a line that is no record)
    assert [r["run_id"] for r in records.read_results(path)] == ["r1"]
    assert [r["run_id"] for r in records.scan_records(path)[0]] == ["r1"]  # an unended line is not read
    records.repair_jsonl(path)
    records.append_record(path, {**REC, "run_id": "r2"})
    assert [r["run_id"] for r in records.read_results(path)] == ["r1", "r2"]
    got, end = records.scan_records(path)
    assert [r["run_id"] for r in got] == ["r1", "r2"] and end == path.stat().st_size


def test_a_torn_record_then_a_whole_one_on_the_same_line_keeps_the_whole_one(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = _old_line({**REC, "run_id": "r2"})
    # a character cut in two by the kill, then the next writer's record without a newline between
    path.write_bytes(_old_line(REC) + _old_line(REC)[:60] + "é".encode()[:1] + whole)
    assert [r["run_id"] for r in records.scan_records(path)[0]] == ["r1", "r2"]


def _short_writes(monkeypatch, room: int):
    """os.write as on a disk with ``room`` bytes left: a short count, then ENOSPC."""
    import errno

    real_write = os.write
    left = {"n": room}

    def write(fd, data):
        if left["n"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data)[: left["n"]])
        left["n"] -= n
        return n

    monkeypatch.setattr(os, "write", write)


def test_a_disk_full_mid_record_raises_instead_of_tearing_it_in_silence(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    records.append_record(path, REC)
    _short_writes(monkeypatch, 20)  # the disk takes 20 bytes of the next record, then is full
    with pytest.raises(OSError) as e:
        records.append_record(path, {**REC, "run_id": "r2"})
    assert e.value.errno == 28
    monkeypatch.undo()
    assert [r["run_id"] for r in records.scan_records(path)[0]] == ["r1"]  # the torn line is skipped
    records.append_record(path, {**REC, "run_id": "r3"})  # the next writer appends behind it
    assert [r["run_id"] for r in records.read_results(path)] == ["r1", "r3"]


def test_write_records_on_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    path = tmp_path / "study-results.jsonl"
    records.write_records(path, [REC])
    before = path.read_bytes()
    real = Path.write_bytes

    def full(self, data):  # the disk takes part of the file, then is full
        real(self, bytes(data)[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(OSError) as e:
        records.write_records(path, [REC, {**REC, "run_id": "r2"}])
    monkeypatch.undo()
    assert e.value.filename == str(path)  # the message names the file, not its stand-in
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study-results.jsonl"]
    assert path.read_bytes() == before


def test_a_record_torn_inside_a_character_loses_that_record_only(tmp_path):
    """A full disk may cut a line in the middle of a UTF-8 character: the readers skip that
    record (the sweep's scan did; read_results refused the whole file as not UTF-8)."""
    path = tmp_path / "results.jsonl"
    base = {"schema": 1, "task": "flipflop", "pe": "rope", "status": "ok", "train": {"seed": 0}, "metrics": {}}
    records.append_record(path, {**base, "run_id": "a"})
    data = records._encode([{**base, "run_id": "b", "status": "failed", "error": "loss ≥ 1e9"}], ensure_ascii=False)
    with open(path, "ab") as f:
        f.write(data[: data.index("≥".encode()) + 1])
    records.append_record(path, {**base, "run_id": "c", "train": {"seed": 1}})  # appended behind the torn bytes
    assert [r["run_id"] for r in records.scan_records(path)[0]] == ["a", "c"]
    assert [r["run_id"] for r in records.read_results(path)] == ["a", "c"]
