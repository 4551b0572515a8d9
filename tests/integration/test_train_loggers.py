"""The Lightning logger of a run (`synthlab train --logger`), offline: nothing phones home.

CSV by default in OUT/<run_id>/logs/ (train/loss and lr every log step), TensorBoard event
files, wandb offline and an MLflow file store in the run directory; none, or no `out`, logs
nothing. A logger whose package is missing, or an unknown name, is refused before anything is
written (exit 2, one line naming the pip extra).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

import synthlab.run.loggers as loggers
from synthlab.cli import main
from synthlab.run.training import train

OV = {"steps": 10, "d_model": 16, "eval_samples": 8}


def _run(tmp_path, logger, **kw):
    out = tmp_path / "out"
    rec = train(
        "flipflop", "nope", preset="smoke", out=out, overrides={**OV, **kw.pop("overrides", {})}, logger=logger, **kw
    )
    assert rec["status"] == "ok", rec.get("error")
    return rec, out / rec["run_id"]


def test_csv_is_the_default_with_loss_and_lr(tmp_path):
    rec, run_dir = _run(tmp_path, loggers.DEFAULT)  # 10 steps: every step is a log step
    assert loggers.DEFAULT == "csv" and rec["logs"] == {"logger": "csv", "dir": "logs"}
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["hparams.yaml", "metrics.csv"]  # no version_N
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").open()))
    assert [int(r["step"]) for r in rows] == list(range(10))
    losses = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert [float(r["train/loss"]) for r in rows] == pytest.approx([x["loss"] for x in losses], rel=1e-6)
    lrs = [float(r["lr"]) for r in rows]  # warmup 2 from lr = 3e-3, then linear decay
    assert lrs[:2] == [1.5e-3, 3e-3] and lrs[1:] == sorted(lrs[1:], reverse=True) and 0 < lrs[-1] < 1e-3
    assert rec["run_id"] in (run_dir / "logs" / "hparams.yaml").read_text()


@pytest.mark.slow
def test_csv_rows_follow_lightnings_flush_grid_and_the_last_step(tmp_path):
    # 401 steps log every 2 steps; a tiny model and batch keep it short
    rec, run_dir = _run(
        tmp_path, "csv", overrides={"steps": 401, "batch_size": 2, "d_model": 8, "task.n_pairs": 4, "eval_samples": 4}
    )
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").open()))
    # Lightning flushes batch k when (k + 1) % log_every == 0: the loss of batches 1, 3, ..., 399,
    # and the last batch, 400, off that grid
    assert [int(r["step"]) for r in rows] == [*range(1, 400, 2), 400]
    assert all(float(r["train/loss"]) > 0 for r in rows) and all(r["lr"] for r in rows)


def test_none_and_no_out_log_nothing(tmp_path, monkeypatch):
    rec, run_dir = _run(tmp_path, "none")
    assert rec["logs"] is None
    assert {p.name for p in run_dir.iterdir()} == {"config.json", "metrics.jsonl", "model.safetensors"}
    monkeypatch.chdir(tmp_path / "out")
    before = sorted(os.listdir("."))
    assert train("flipflop", "nope", preset="smoke", overrides=OV, logger="csv")["logs"] is None
    assert sorted(os.listdir(".")) == before


def test_tensorboard_writes_event_files_in_the_run_directory(tmp_path):
    EventAccumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard is not installed (pip install 'synthlab-pe[tensorboard]')",
    ).EventAccumulator

    rec, run_dir = _run(tmp_path, "tensorboard", overrides={"eval_every": 5})
    assert rec["logs"] == {"logger": "tensorboard", "dir": "logs"}
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "logs").iterdir())
    acc = EventAccumulator(str(run_dir / "logs"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "lr", "test/token_acc", "ood-sparse/read_error"} <= tags
    assert [e.step for e in acc.Scalars("test/token_acc")] == [5, 10]


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """No account, no network: wandb's own config and cache under tmp_path; WANDB_MODE unset, so
    the run is offline by synthlab's default."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'synthlab-pe[wandb]')")
    for k in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT"):
        monkeypatch.delenv(k, raising=False)
    for k in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(k, str(tmp_path / "wandb-home" / k.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")


def test_wandb_runs_offline_into_the_run_directory(tmp_path, wandb_offline):
    rec, run_dir = _run(tmp_path, "wandb", overrides={"eval_every": 5})
    logs = rec["logs"]
    assert logs["logger"] == "wandb" and logs["dir"].startswith("wandb/offline-run-") and logs["run"]
    files = run_dir / logs["dir"]
    assert (files / f"run-{logs['run']}.wandb").stat().st_size > 0  # what `wandb sync` uploads later


@pytest.fixture
def mlflow_offline(monkeypatch):
    """No server and no usage telemetry (MLflow reads these when it is first imported)."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'synthlab-pe[mlflow]')")
    for k in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")


def test_mlflow_logs_to_a_file_store_in_the_run_directory(tmp_path, monkeypatch, mlflow_offline):
    monkeypatch.chdir(tmp_path)  # a relative --out, as the command line's default
    rec, run_dir = _run(Path("."), "mlflow", overrides={"eval_every": 5})
    logs = rec["logs"]
    assert logs["logger"] == "mlflow" and logs["dir"] == "mlruns"
    (run,) = [p for p in (run_dir / "mlruns").glob(f"*/{logs['run']}")]
    assert (run / "metrics" / "train" / "loss").is_file() and (run / "metrics" / "test" / "token_acc").is_file()
    assert (run / "params" / "run_id").read_text() == rec["run_id"]
    # MLflow's process-wide tracking URI is not left pointing into this run (a second run logs elsewhere)
    assert "MLFLOW_TRACKING_URI" not in os.environ and "MLFLOW_ALLOW_FILE_STORE" not in os.environ
    rec2, run_dir2 = _run(Path("."), "mlflow")
    assert list((run_dir2 / "mlruns").glob(f"*/{rec2['logs']['run']}"))


def test_mlflow_uses_the_tracking_uri_of_the_environment(tmp_path, monkeypatch, mlflow_offline):
    store = tmp_path / "server-store"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the test's stand-in for a server
    rec, run_dir = _run(tmp_path, "mlflow")
    assert rec["logs"]["dir"] is None and not (run_dir / "mlruns").exists()
    assert list(store.glob(f"*/{rec['logs']['run']}/metrics/train/loss"))
    assert os.environ["MLFLOW_TRACKING_URI"] == store.as_uri()


def test_mlflow_keeps_a_tracking_uri_set_in_the_process(tmp_path, monkeypatch, mlflow_offline):
    import mlflow

    users = (tmp_path / "users-store").as_uri()
    mlflow.set_tracking_uri(users)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # set in the process only: the run logs to its own store
    try:
        rec, run_dir = _run(tmp_path, "mlflow")
        assert rec["logs"]["dir"] == "mlruns"  # the logger pointed MLflow at the run's store meanwhile
        assert mlflow.get_tracking_uri() == users
    finally:
        mlflow.set_tracking_uri(None)
    assert not mlflow.tracking.is_tracking_uri_set()


@pytest.mark.parametrize("name,extra", [("tensorboard", "tensorboard"), ("wandb", "wandb"), ("mlflow", "mlflow")])
def test_a_missing_logger_package_names_its_extra_before_writing(tmp_path, monkeypatch, name, extra):
    monkeypatch.setattr(loggers, "installed", lambda module: False)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"logger {name} needs the \w+ package: pip install 'synthlab-pe\[{extra}\]'"):
        train("flipflop", "nope", preset="smoke", out=out, overrides=OV, logger=name)
    assert not out.exists()


@pytest.mark.parametrize(
    "name,match",
    [
        ("nosuch", "--logger 'nosuch' is not allowed (allowed: csv, tensorboard, wandb, mlflow, none)"),
        ("wandb", "--logger wandb needs the wandb package: pip install 'synthlab-pe[wandb]'"),
    ],
)
def test_cli_bad_logger_exits_2_with_one_line_and_nothing_written(tmp_path, capsys, monkeypatch, name, match):
    monkeypatch.setattr(loggers, "installed", lambda module: False)
    out = tmp_path / "runs"
    rc = main(
        ["train", "flipflop", "--pe", "rope", "--preset", "smoke", "--logger", name, "--out", str(out), "--quiet"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0] == f"synthlab train: error: {match}"
    assert not out.exists()


def test_cli_logger_reaches_the_record(tmp_path, capsys):
    out = tmp_path / "runs"
    rc = main(
        [
            "train",
            "flipflop",
            "--pe",
            "nope",
            "--preset",
            "smoke",
            "--set",
            "steps=4",
            "--set",
            "d_model=16",
            "--logger",
            "none",
            "--out",
            str(out),
            "--quiet",
            "--json",
        ]
    )
    assert rc == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["logs"] is None and not (out / rec["run_id"] / "logs").exists()
