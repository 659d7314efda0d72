"""``--log-to mlflow[:TRACKING_URI]``: one MLflow run per command, in the experiment ``MLFLOW_EXPERIMENT_NAME``
(default ``laya``). The tracking URI is TARGET, else MLflow's own (``MLFLOW_TRACKING_URI``, or its default
local store); a server is just a URI (``http://host:5000``). A ``file:`` URI (or a plain folder) is a local file
store: MLflow 3 keeps it in maintenance and asks for ``MLFLOW_ALLOW_FILE_STORE=true``, which naming one here
sets (for this process).

Before any work, ``check`` reaches the store once with a short timeout and no retries (a server: a TCP connection
within ``CONNECT_SECONDS`` first; a file store: its folder writable): a bad URI, a closed port or an unwritable
folder is one line, not MLflow's minutes of retries and a traceback after them."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.parse
from pathlib import Path

from ..errors import LayaError
from .base import Tracker, finite, flat_params
from .guest import reason_of

EXPERIMENT = "laya"
MAX_PARAM = 6000  # MLflow's limit on a parameter's value
MAX_TAG = 5000
CONNECT_SECONDS = 5.0  # a tracking server that does not accept a connection within this is unreachable
CHECK_REQUEST_SECONDS = "15"  # the check's one request (MLFLOW_HTTP_REQUEST_TIMEOUT), without retries


@contextlib.contextmanager
def _one_quick_try():
    """MLflow's HTTP requests without retries and with a short timeout, for the duration of the check only."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=CHECK_REQUEST_SECONDS)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _reach_server(uri: str) -> None:
    """A TCP connection to an http(s) tracking server within ``CONNECT_SECONDS``, else one line."""
    parts = urllib.parse.urlparse(uri)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=CONNECT_SECONDS).close()
    except OSError as e:
        why = e.strerror or reason_of(e) or "no answer"
        raise LayaError(f"--log-to mlflow: cannot reach the tracking server {uri} ({why}, within "
                        f"{CONNECT_SECONDS:g} s)") from None  # fmt: skip


def _uri(target: str | None) -> str | None:
    if target is None:
        return None
    if "://" in target or target.startswith(("file:", "sqlite:", "databricks")):
        uri = target
    else:  # a plain folder: a file store there
        uri = Path(target).expanduser().resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class MlflowTracker(Tracker):
    """Through ``MlflowClient`` (no fluent API: no process-wide active run or experiment to leave behind)."""

    name = "mlflow"

    def __init__(self, target: str | None = None):
        import mlflow

        self.mlflow = mlflow
        self.uri = _uri(target)
        self.client = None
        self.run_id: str | None = None

    def check(self) -> None:
        """The tracking store answers one request (a server reached first, a file store's folder writable)."""
        uri = self.uri or self.mlflow.get_tracking_uri()
        scheme = urllib.parse.urlparse(uri).scheme
        if scheme in ("http", "https"):
            _reach_server(uri)
        elif scheme == "file":
            from ..fileio import check_folder_writable

            check_folder_writable(urllib.parse.urlparse(uri).path, "the MLflow file store (--log-to mlflow)")
        try:
            with _one_quick_try():
                client = self.mlflow.tracking.MlflowClient(tracking_uri=uri)
                client.search_experiments(max_results=1)
        except Exception as e:
            raise LayaError(f"--log-to mlflow: the tracking store {uri} cannot be used ({reason_of(e)})") from None

    def _experiment(self) -> str:
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return os.environ["MLFLOW_EXPERIMENT_ID"]
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found is not None else self.client.create_experiment(name)

    def start(self, run_name: str, params: dict, tags: dict[str, str]) -> None:
        from mlflow.entities import Param

        self.client = self.mlflow.tracking.MlflowClient(tracking_uri=self.uri)
        run = self.client.create_run(
            self._experiment(), run_name=run_name, tags={k: str(v)[:MAX_TAG] for k, v in tags.items()}
        )
        self.run_id = run.info.run_id
        flat = flat_params(params)
        self.client.log_batch(self.run_id, params=[Param(k, v[:MAX_PARAM]) for k, v in flat.items()])

    def metrics(self, values: dict, step: int | None = None) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        batch = [Metric(k, v, stamp, step or 0) for k, v in finite(values).items()]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def tags(self, values: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)[:MAX_TAG]) for k, v in values.items()])

    def artifact(self, path: str | Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status)
            self.run_id = None

    def where(self) -> str:
        if self.run_id is None:
            return "mlflow"
        return f"mlflow run {self.run_id} at {self.client.tracking_uri}"
