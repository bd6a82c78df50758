"""A real Arize Phoenix server for the backend tests: started on loopback ports, read back over its API, stopped.

Phoenix runs from its own virtual environment (``ACP_OTEL_PHOENIX_PYTHON``, set up by ``nox -s phoenix``),
through ``phoenix_launch.py``, with a temporary ``PHOENIX_WORKING_DIR`` (its SQLite database) and every
listener on 127.0.0.1. Its spans are read through the REST API (``/v1/projects/{name}/spans``) and GraphQL
(``/graphql``, for what the UI shows as a span's input and output).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
LAUNCHER = Path(__file__).resolve().parent / "phoenix_launch.py"
START_TIMEOUT = 300.0  # database migrations on a loaded machine take most of a minute
LOOPBACK_ADDRESSES = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class PhoenixServer:
    """``with PhoenixServer(python) as phoenix: ...``: Phoenix's process, its ports, and its API."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="acp-otel-phoenix-"))
        self.log_path = self._dir / "phoenix.log"

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> PhoenixServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "PHOENIX_HOST": LOOPBACK,
                "PHOENIX_PORT": str(self.http_port),
                "PHOENIX_GRPC_PORT": str(self.grpc_port),
                "PHOENIX_WORKING_DIR": str(self._dir / "working"),
                # Nothing leaves the machine: no analytics pixels, fonts or downloads, no assistant.
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
                "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            }
        )
        return env

    def start(self) -> None:
        (self._dir / "working").mkdir()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [self.python, str(LAUNCHER)],
                env=self.env(),
                cwd=str(self._dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            if self._healthy() and self._grpc_listening():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Phoenix not up after {START_TIMEOUT:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop Phoenix by its PID (SIGTERM, then SIGKILL), and remove its working directory."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "Phoenix is not running"
        return self.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text("utf-8", "replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=5) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def _grpc_listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, self.grpc_port), timeout=2):
            return True
        return False

    # ------------------------------------------------------------------ sockets

    def listening_sockets(self) -> list[tuple[str, str, int]]:
        """Every socket Phoenix's process listens on, as ``(protocol, address, port)``, from ``ss -ltunpH``."""
        ss = shutil.which("ss")
        if ss is None:
            raise RuntimeError("`ss` (iproute2) is needed to check Phoenix's listening sockets")
        out = subprocess.run([ss, "-ltunpH"], capture_output=True, text=True, check=True, timeout=30).stdout
        found = []
        for line in out.splitlines():
            fields = line.split()
            if f"pid={self.pid}," not in line or len(fields) < 5:
                continue
            address, _, port = fields[4].rpartition(":")
            found.append((fields[0], address.strip("[]"), int(port)))
        return found

    # ------------------------------------------------------------------ endpoints and API

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base_url}{path}", timeout=30) as response:
            return json.loads(response.read())

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of ``project`` as the REST API gives it (``[]`` while the project does not exist)."""
        spans: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
            path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans?{urllib.parse.urlencode(query)}"
            try:
                page = self._get(path)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # no span of this project has arrived yet
                    return []
                raise
            spans.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans

    def wait_for_spans(self, project: str, span_ids: set[str], timeout: float = 120.0) -> list[dict[str, Any]]:
        """Poll until every span id in ``span_ids`` is in ``project`` (Phoenix inserts in batches)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans(project)
            if span_ids <= {s["context"]["span_id"] for s in spans}:
                return spans
            if time.monotonic() > deadline:
                missing = span_ids - {s["context"]["span_id"] for s in spans}
                raise TimeoutError(f"{len(missing)} of {len(span_ids)} spans not in Phoenix project {project!r}")
            time.sleep(0.5)

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.base_url}/graphql", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        if answer.get("errors"):
            raise AssertionError(f"GraphQL errors: {answer['errors']}")
        return answer["data"]
