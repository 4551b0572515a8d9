"""Result records: the one writer and reader of ``results.jsonl`` and ``study-results.jsonl``.

A record (docs/interfaces.md) is one JSON line appended with one fsync'd write
(:func:`append_record`), cleaned of NaN (:func:`clean`), and read back by :func:`read_results`
/ :func:`scan_records`, which skip a torn line; readers keep one record per (study, cell)
(:func:`latest_records`). Why and how: docs/architecture.md, "Records: one writer, one reader".
"""

from __future__ import annotations

import io
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA = 1


def clean(obj: Any) -> Any:
    """JSON-safe copy: NaN / inf -> None (records never hold NaN), numpy and torch scalars ->
    Python numbers, tuples -> lists, keys -> str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if obj is None or isinstance(obj, (str, bytes, int)):
        return obj
    if isinstance(obj, numbers.Integral):  # numpy integers
        return int(obj)
    if isinstance(obj, numbers.Real):  # numpy floats that are no Python float (float32, longdouble)
        return clean(float(obj))
    if hasattr(obj, "item"):  # numpy bools, 0-d arrays, tensors
        try:
            return clean(obj.item())
        except Exception:
            return str(obj)
    return obj


def to_json(x: Any, *, ensure_ascii: bool = False) -> str:
    """One JSON line's text (no newline). The sweep's own lines pass ``ensure_ascii=True``, as
    they always have, so a file rebuilt by a new version is byte for byte the old one."""
    return json.dumps(clean(x), allow_nan=False, ensure_ascii=ensure_ascii)


def _encode(records: Iterable[dict[str, Any]], *, ensure_ascii: bool) -> bytes:
    """The JSON lines of ``records`` (each ended by a newline), written by jsonlines."""
    import jsonlines

    buf = io.BytesIO()
    with jsonlines.Writer(buf, dumps=lambda x: to_json(x, ensure_ascii=ensure_ascii)) as writer:
        for r in records:
            writer.write(r)
    return buf.getvalue()


def append_record(path: str | os.PathLike, record: dict[str, Any], *, ensure_ascii: bool = False) -> None:
    """Append one JSON line with a single fsync'd write (the file stays parseable)."""
    from synthlab.core.errors import naming

    data = _encode([record], ensure_ascii=ensure_ascii)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with naming(path):  # os.write names no file: "No space left on device" alone said nothing of where
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # a full disk (or a file size limit) may take only part of the line and say so by the
            # count alone: write on, so the next write raises the error instead of the record being
            # torn in silence (the torn line is skipped by readers and ended by the next writer)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)


def repair_jsonl(path: Path) -> None:
    """End a torn final line (a record cut by a kill) so the next record starts a new line."""
    from synthlab.core.errors import naming

    if not path.exists() or path.stat().st_size == 0:
        return
    with naming(path), open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace ``path`` by these records, atomically (a study's grid rebuilt from its trials)."""
    from synthlab.core.errors import naming

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with naming(path, tmp):  # an error names the file, not its temporary stand-in
            tmp.write_bytes(_encode(records, ensure_ascii=True))
            os.replace(tmp, path)
    finally:  # a full disk: no temporary file left behind
        if os.path.lexists(tmp):
            os.unlink(tmp)


def with_cell(record: dict[str, Any], key: str) -> dict[str, Any]:
    """``record`` with the sweep cell's key as field ``cell``, after ``trial``."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if k != "cell":
            out[k] = v
        if k == "trial":
            out["cell"] = key
    out.setdefault("cell", key)
    return out


def _section(overrides: dict[str, Any], name: str) -> dict[str, Any]:
    """{"model.d_model": 64, "train.lr": 1e-3} -> {"d_model": 64} for name "model"."""
    return {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(name + ".")}


def failed_record(
    task: str, pe: str, positions: str | None, overrides: dict[str, Any], seed: int, study: str, trial: int, error: str
) -> dict[str, Any]:
    """The record of a run whose trainer raised instead of returning one: what the cell sets,
    so the failure sits in the right grid row."""
    from synthlab import generators
    from synthlab.model.registry import PE_REVISION

    ov = overrides
    revision = generators.TASKS[task].REVISION if task in generators.TASKS else None
    return {
        "schema": SCHEMA,
        "task": task,
        "task_params": _section(ov, "task"),
        "task_revision": revision,
        "pe_revision": PE_REVISION,
        "pe": pe,
        "positions": positions,
        "model": _section(ov, "model"),
        "train": {**_section(ov, "train"), "seed": seed},
        "overrides": ov,
        "study": study,
        "trial": trial,
        "status": "failed",
        "error": error,
    }


_RECORD_START = '{"schema"'


def _loads(line: str) -> Any:
    """One line's JSON value; a torn record followed by a whole one on the same line (the next
    writer appended behind a kill) gives the whole one. ValueError when neither parses."""
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        i = line.rfind(_RECORD_START)
        if i <= 0:
            raise
        return json.loads(line[i:])


def _reader(lines: Iterable[str]) -> Iterator[dict[str, Any] | None]:
    """The JSON object of each non-blank line through jsonlines, None for a line that holds
    none (torn, not JSON, or another JSON value)."""
    import jsonlines

    # the lines given are str, so are those its loads gets (the stub allows bytes too)
    with jsonlines.Reader(lines, loads=_loads) as reader:  # type: ignore[arg-type]
        while True:
            try:
                yield reader.read(type=dict, skip_empty=True)
            except EOFError:
                return
            except jsonlines.InvalidLineError:
                yield None


def identity(r: dict[str, Any]) -> str | None:
    """What one run of a sweep's cell is: its study and cell key (for records before the key,
    the settings and seed the record names); None for a run outside a study."""
    study = r.get("study")
    if study is None:
        return None
    if isinstance(r.get("cell"), str):
        return json.dumps([study, r["cell"]])
    model, train = r.get("model") or {}, r.get("train") or {}
    return json.dumps(
        [
            study,
            r.get("task"),
            r.get("pe"),
            r.get("positions"),
            r.get("rope_scaling"),
            r.get("task_params"),
            r.get("overrides"),
            [model.get(k) for k in ("d_model", "n_layers", "n_heads")],
            [train.get(k) for k in ("steps", "batch_size", "lr", "seed")],
        ],
        sort_keys=True,
        default=str,
    )


def latest_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per run (:func:`identity`): the latest finished one (a failure only where
    none finished), in the place of the first. Files joined in any order give the same runs: a
    cell that failed on one machine and finished on another is a finished run."""
    slot: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for r in records:
        key = identity(r)
        if key is None or key not in slot:
            if key is not None:
                slot[key] = len(out)
            out.append(r)
        elif r.get("status") == "ok" or out[slot[key]].get("status") != "ok":
            out[slot[key]] = r
    return out


def scan_records(path: str | os.PathLike, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects on the complete lines of ``path`` from byte ``offset`` on (unparsable
    lines skipped, nothing deduplicated), and the offset after the last complete line: what a
    sweep reads to find its finished cells, a few appended lines at a time."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1
    # decoded leniently: a kill may cut a character in two before a whole record on the line
    lines = (ln.decode("utf-8", errors="replace") for ln in data[:end].split(b"\n"))
    out = [obj for obj in _reader(lines) if obj is not None]
    return out, offset + end


# a record's parts that are objects (or null) wherever synthlab writes them
_OBJECT_FIELDS = ("metrics", "by_length", "model", "train", "task_params", "pe_params")


def _check_shape(obj: dict[str, Any], path: Path, line: int) -> None:
    """A record whose parts are not what synthlab writes (``metrics`` a list, a split's metrics
    text, the task not a name): the file was damaged; DamagedFile (exit 1) naming it."""
    from synthlab.core.errors import DamagedFile

    def damaged(what: str) -> DamagedFile:
        return DamagedFile(path, f"line {line}: {what}: not a record synthlab wrote (a damaged file?)")

    for key in ("task", "pe", "status"):
        if not isinstance(obj[key], str):
            raise damaged(f"{key} is {type(obj[key]).__name__}, not a string")
    for key in _OBJECT_FIELDS:
        v = obj.get(key)
        if v is not None and not isinstance(v, dict):
            raise damaged(f"{key} is {type(v).__name__}, not an object")
    if obj.get("curve") is not None and not isinstance(obj["curve"], list):
        raise damaged(f"curve is {type(obj['curve']).__name__}, not a list")
    for split, m in (obj.get("metrics") or {}).items():
        if m is not None and not isinstance(m, dict):
            raise damaged(f"metrics.{split} is {type(m).__name__}, not an object")


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Result records of a JSONL file, one per run (:func:`latest_records`: a cell recorded
    twice counts once). A torn line (cut by a kill) is skipped; a file that is missing, empty
    of records, or not result records raises ValueError."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"results file {str(p)!r} does not exist")
    lines, undecodable = [], 0
    for raw in p.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:  # a record torn inside a character (a kill, a full disk): that line
            undecodable += 1  # alone is skipped, or the whole record a later writer appended behind it read
            lines.append(raw.decode("utf-8", errors="replace"))
    if lines and undecodable == len(lines):
        raise ValueError(f"results file {str(p)!r} is not JSON lines (not UTF-8 text)")
    records, bad = [], 0
    for n, obj in enumerate(_reader(lines), 1):
        if obj is None:
            bad += 1
            continue
        if "status" not in obj or "pe" not in obj or "task" not in obj:
            raise ValueError(f"results file {str(p)!r} line {n}: not a result record (needs task, pe, status)")
        _check_shape(obj, p, n)
        records.append(obj)
    if not records:
        raise ValueError(
            f"results file {str(p)!r} holds no result records (expected JSON lines from synthlab train/sweep)"
        )
    if bad > 1 and bad > len(lines) // 10:
        # a kill leaves at most one torn line per writer; this many is not a results file
        raise ValueError(f"results file {str(p)!r}: {bad} of {len(lines)} lines are not JSON")
    return latest_records(records)
