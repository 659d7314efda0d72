"""Experiment trackers (issue 27): ``--log-to mlflow|tensorboard`` (and ``LAYA_LOG_TO``) on train, audit,
depth and bench, read back from a local MLflow file store and a TensorBoard log folder (no server)."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
import torch
from helpers import assert_user_error, invoke


def _tb_runs(root):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        runs[folder.name.split("-")[0]] = (folder, acc)
    return runs


def _text(acc, tag: str) -> str:
    return acc.Tensors(tag)[-1].tensor_proto.string_val[0].decode()


@pytest.fixture()
def tensorboard_dir(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install 'laya-audit[tensorboard]'")
    return tmp_path / "runs"


def test_train_and_audit_logged_to_tensorboard_read_back(tmp_path, tensorboard_dir):
    model, audit_json = tmp_path / "m.pt", tmp_path / "audit.json"
    log_to = f"tensorboard:{tensorboard_dir}"
    result = invoke("train", "--epochs", "3", "--d-star", "16", "--out", model, "--log-to", log_to)
    assert result.exit_code == 0, result.output
    assert "logged (finished): tensorboard run" in result.output
    args = ["--samples", "60", "--compare", "ig", "--json", audit_json, "--fail-under", "faithfulness=-1"]
    result = invoke("audit", model, *args, "--log-to", log_to, "-q")
    assert result.exit_code == 0, result.output

    runs = _tb_runs(tensorboard_dir)
    assert set(runs) == {"train", "audit"}
    folder, acc = runs["train"]
    ckpt = torch.load(model, weights_only=True)
    losses = [e.value for e in acc.Scalars("train/loss")]
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3]
    assert losses == pytest.approx([h["loss"] for h in ckpt["history"]], rel=1e-6)
    assert acc.Scalars("test_accuracy")[0].value == pytest.approx(ckpt["metrics"]["test_accuracy"], rel=1e-6)
    assert "d_star = 16" in _text(acc, "options/text_summary")
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")  # the HPARAMS tab
    assert (folder / "artifacts" / "m.pt").read_bytes() == model.read_bytes()
    assert _text(acc, "tags/status/text_summary") == "FINISHED"

    folder, acc = runs["audit"]
    doc = json.loads(audit_json.read_text())
    for method in ("laya", "ig", "random"):
        value = acc.Scalars(f"faithfulness/{method}")[0].value
        assert value == pytest.approx(doc["methods"][method]["faithfulness"], rel=1e-6)
        assert f"deletion_at_1/{method}" in acc.Tags()["scalars"]
    assert acc.Scalars("gate/passed")[0].value == 1.0
    assert _text(acc, "tags/laya.gate/text_summary") == "PASS"
    assert _text(acc, "tags/laya.methods/text_summary") == "laya,ig,random"
    assert json.loads((folder / "artifacts" / "audit.json").read_text())["options"]["values"]["samples"] == 60


def test_depth_and_bench_logged_to_tensorboard(tmp_path, digits_ckpt, tensorboard_dir):
    log_to = f"tensorboard:{tensorboard_dir}"
    result = invoke("depth", digits_ckpt, "--time-repeats", "0", "--samples", "80", "--log-to", log_to)
    assert result.exit_code == 0, result.output
    bench = ["--heads", "last,laya", "--seeds", "1", "--epochs", "1", "--audit-samples", "40", "--compare", "ig"]
    result = invoke("bench", *bench, "--out", tmp_path / "bench", "--log-to", log_to, "-q")
    assert result.exit_code == 0, result.output
    runs = _tb_runs(tensorboard_dir)
    _, depth = runs["depth"]
    assert [e.step for e in depth.Scalars("depth/accuracy")] == [1, 2, 3]
    _, bench_run = runs["bench"]
    assert {"test_accuracy/last", "test_accuracy/laya", "faithfulness/laya/ig"} <= set(bench_run.Tags()["scalars"])


@pytest.fixture()
def mlflow_store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'laya-audit[mlflow]'")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps file stores behind this switch
    return tmp_path / "mlruns"


def _mlflow_runs(store) -> dict:
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("laya")
    runs = client.search_runs([experiment.experiment_id])
    return client, {r.data.tags["laya.command"]: r for r in runs}


def test_train_and_audit_logged_to_a_local_mlflow_store_read_back(tmp_path, mlflow_store, monkeypatch):
    model = tmp_path / "m.pt"
    result = invoke("train", "--epochs", "2", "--out", model, "--log-to", f"mlflow:{mlflow_store.as_uri()}", "-q")
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("LAYA_LOG_TO", f"mlflow:{mlflow_store}")  # the environment's, and a plain folder
    files = ["--json", tmp_path / "a.json", "--markdown", tmp_path / "a.md", "--junit", tmp_path / "a.xml"]
    result = invoke(
        "audit", model, "--samples", "50", "--compare", "gradxact", "--fail-under", "laya:faithfulness=2", *files
    )
    assert result.exit_code == 1, result.output  # the gate failed: the run is still a finished result

    client, runs = _mlflow_runs(mlflow_store)
    train, audit = runs["train"], runs["audit"]
    ckpt = torch.load(model, weights_only=True)
    history = client.get_metric_history(train.info.run_id, "train/val_accuracy")
    assert [m.step for m in history] == [1, 2]
    assert [m.value for m in history] == pytest.approx([h["val_accuracy"] for h in ckpt["history"]], rel=1e-6)
    assert train.data.metrics["test_accuracy"] == pytest.approx(ckpt["metrics"]["test_accuracy"], rel=1e-6)
    assert train.data.params["epochs"] == "2" and train.data.params["d_star"] == "96"
    assert train.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(train.info.run_id)] == ["m.pt"]

    doc = json.loads((tmp_path / "a.json").read_text())
    for method in ("laya", "gradxact", "random"):
        assert audit.data.metrics[f"faithfulness/{method}"] == pytest.approx(doc["methods"][method]["faithfulness"])
    assert audit.data.metrics["gate/passed"] == 0.0 and audit.data.tags["laya.gate"] == "FAIL"
    assert "laya: faithfulness" in audit.data.tags["laya.verdict"] and audit.info.status == "FINISHED"
    assert sorted(a.path for a in client.list_artifacts(audit.info.run_id)) == ["a.json", "a.md", "a.xml"]


def test_a_run_that_fails_is_logged_as_failed(tmp_path, mlflow_store):
    args = ["--dataset", "fashion-mnist", "--data-dir", tmp_path / "nothing-here", "--log-to", f"mlflow:{mlflow_store}"]
    result = invoke("train", *args)
    assert result.exit_code == 2, result.output
    _, runs = _mlflow_runs(mlflow_store)
    assert runs["train"].info.status == "FAILED"


@pytest.mark.parametrize("name, extra", [("mlflow", "mlflow"), ("tensorboard", "tensorboard"), ("wandb", "wandb")])
@pytest.mark.parametrize("command", ["train", "audit", "bench"])
def test_a_missing_extra_is_one_line_naming_the_pip_command(monkeypatch, digits_ckpt, name, extra, command):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == name else real(n, *a))
    args = [digits_ckpt] if command == "audit" else []
    assert_user_error(invoke(command, *args, "--log-to", name), f"pip install 'laya-audit[{extra}]'")


def test_an_unknown_tracker_is_one_line(digits_ckpt, monkeypatch):
    assert_user_error(invoke("audit", digits_ckpt, "--log-to", "neptune"), "--log-to", "mlflow", "tensorboard", "wandb")
    monkeypatch.setenv("LAYA_LOG_TO", "none")
    assert invoke("info", digits_ckpt).exit_code == 0


def _wandb_records(path):
    """The records of an offline W&B run file (``run-<id>.wandb``): wandb's LevelDB-style log (a ``:W&B`` header,
    then 32 KiB blocks of records, each a 7-byte header — CRC, length, kind: full, first, middle, last — and a
    slice of one protobuf ``Record``), parsed with wandb's own protobuf classes."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, part, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length, kind) == (0, 0):  # the rest of a block is padding
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(part)
            out.append(record)
    return out


def _wandb_run(folder) -> dict:
    """An offline run read back: name, project, tags, config keys, history rows (step -> values), summary."""
    (path,) = folder.glob("run-*.wandb")
    run: dict = {"history": {}, "summary": {}}
    for r in _wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run.update(name=r.run.display_name, project=r.run.project, tags=list(r.run.tags))
            run["config"] = {u.key: json.loads(u.value_json) for u in r.run.config.update}
        elif kind == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            run["history"][r.history.step.num] = row
        elif kind == "summary":
            run["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.summary.update})
        elif kind == "exit":
            run["exit_code"] = r.exit.exit_code
    return run


def _finished_wandb_run(folder, wait: float = 30.0) -> dict:
    """``_wandb_run`` once wandb's own process has written the run's exit record: it writes the file on its own
    (the suite once read a run file before its records were there; the laya side had returned)."""
    deadline = time.monotonic() + wait
    while "exit_code" not in (run := _wandb_run(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return run


def test_train_and_audit_logged_to_an_offline_wandb_run_read_back(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra: pip install 'laya-audit[wandb]'")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    model, audit_json = tmp_path / "m.pt", tmp_path / "audit.json"
    result = invoke("train", "--epochs", "3", "--d-star", "16", "--out", model, "--log-to", "wandb:laya-test")
    assert result.exit_code == 0, result.output
    assert "logged (finished): wandb run" in result.output and "(offline)" in result.output
    args = ["--samples", "60", "--compare", "ig", "--json", audit_json, "--fail-under", "faithfulness=-1", "-q"]
    assert invoke("audit", model, *args, "--log-to", "wandb:laya-test").exit_code == 0

    folders = sorted((tmp_path / "wandb").glob("offline-run-*"))
    runs = {r["tags"][0]: (f, r) for f in folders for r in [_finished_wandb_run(f)]}
    assert set(runs) == {"train", "audit"}
    _, train = runs["train"]
    ckpt = torch.load(model, weights_only=True)
    assert train["project"] == "laya-test" and train["config"]["d_star"] == 16 and train["exit_code"] == 0
    losses = {step: row["train/loss"] for step, row in train["history"].items() if "train/loss" in row}
    assert sorted(losses) == [1, 2, 3]
    assert [losses[k] for k in (1, 2, 3)] == pytest.approx([h["loss"] for h in ckpt["history"]], rel=1e-6)
    assert train["summary"]["test_accuracy"] == pytest.approx(ckpt["metrics"]["test_accuracy"], rel=1e-6)
    assert train["summary"]["tags/status"] == "FINISHED"

    folder, audit = runs["audit"]
    doc = json.loads(audit_json.read_text())
    for method in ("laya", "ig", "random"):
        assert audit["summary"][f"faithfulness/{method}"] == pytest.approx(doc["methods"][method]["faithfulness"])
    assert audit["summary"]["gate/passed"] == 1.0 and audit["summary"]["tags/laya.gate"] == "PASS"
    assert json.loads((folder / "files" / "audit.json").read_text())["options"]["values"]["samples"] == 60
