"""A backend that accepts connections and never answers never blocks the proxy: with ``--agent-telemetry`` the
receiver keeps answering the agent at once (past the forwarding queue's bound, what cannot be queued is dropped
and counted), the ACP relay keeps its pace, the proxy exits within its bound and says the loss in its exit line.
Real processes: the proxy, a synthetic agent, the receiver's address read from the agent's environment."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from acp_app import open_session, prompt
from harness import base_env, proxied_client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from promise_runs import agent_command, agent_environ

from acp_otel._proxy.forwarder import MAX_QUEUED

pytestmark = pytest.mark.e2e


class StalledBackend:
    """Accepts every connection, reads nothing, answers nothing."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(connection)

    def __enter__(self) -> StalledBackend:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._listener.close()
        for connection in self._held:
            connection.close()


def _request(n: int) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, n.to_bytes(8, "big"), "chat stalled"
    span.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    return request.SerializeToString()


async def test_a_stalled_backend_never_blocks_the_receiver_the_relay_or_the_exit(tmp_path: Path) -> None:
    command = agent_command(tmp_path, "none", {})
    with StalledBackend() as backend:
        env = base_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint,
            OTEL_EXPORTER_OTLP_TIMEOUT="60000",  # each export waits a minute for the answer that never comes
            OTEL_METRICS_EXPORTER="none",
            OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS="all",
        )
        args = ["--service-name", "proxy", "--agent-telemetry"]
        async with proxied_client(command, env, args) as proxied:
            session_id = await open_session(proxied.conn)
            receiver = urlsplit(agent_environ(proxied.proc.pid, command[1])["OTEL_EXPORTER_OTLP_ENDPOINT"])
            connection = http.client.HTTPConnection(receiver.hostname, receiver.port, timeout=5)
            slowest = 0.0
            for n in range(MAX_QUEUED + 64):  # more than the forwarding queue holds
                started = time.monotonic()
                connection.request("POST", "/v1/traces", _request(n), {"Content-Type": "application/x-protobuf"})
                answer = connection.getresponse()
                answer.read()
                assert answer.status == 200
                slowest = max(slowest, time.monotonic() - started)
            connection.close()
            started = time.monotonic()
            await prompt(proxied.conn, session_id, "hi")
            relay_s = time.monotonic() - started
            closing = time.monotonic()
        exit_s = time.monotonic() - closing
    assert slowest < 2.0, f"the receiver took {slowest:.1f} s to answer while the backend stalled"
    assert relay_s < 2.0, f"a prompt took {relay_s:.1f} s through the proxy while the backend stalled"
    assert proxied.returncode == 0 and exit_s < 15.0, (exit_s, proxied.stderr)
    lines = [line for line in proxied.stderr.splitlines() if line.startswith("acp-otel proxy: telemetry:")]
    assert len(lines) == 1 and "of the agent's spans not forwarded to " + backend.endpoint in lines[0], proxied.stderr
