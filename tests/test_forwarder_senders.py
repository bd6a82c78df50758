"""The forwarder's senders against real backends on loopback: the export timeout, the headers, TLS with a
client certificate over OTLP/HTTP, and OTLP/gRPC (plain, TLS, slow and unreadable settings), each loss counted
and said. Certificates are made with the ``openssl`` command for each run."""

from __future__ import annotations

import http.server
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1 import trace_pb2

from acp_otel._proxy import forwarder as fw

_SETTINGS = (
    "ENDPOINT",
    "PROTOCOL",
    "HEADERS",
    "TIMEOUT",
    "CERTIFICATE",
    "CLIENT_CERTIFICATE",
    "CLIENT_KEY",
    "INSECURE",
)


def _spans(count: int) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for n in range(count):
        request.resource_spans.add().scope_spans.add().spans.add(name=f"s{n}", trace_id=b"\x01" * 16)
    return request


def _logs(count: int) -> logs_service_pb2.ExportLogsServiceRequest:
    request = logs_service_pb2.ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.extend(LogRecord() for _ in range(count))
    return request


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for signal in ("", "TRACES_", "METRICS_", "LOGS_"):
        for name in (*_SETTINGS, "COMPRESSION"):
            monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{signal}{name}", raising=False)
    return monkeypatch


def _send_all(*requests: tuple[str, Any], bound: float = 10.0) -> tuple[fw.Forwarder, float]:
    forwarder = fw.Forwarder()
    started = time.monotonic()
    for signal, message in requests:
        forwarder.put(signal, message)
    assert forwarder.close(started + bound)
    return forwarder, time.monotonic() - started


# ---------------------------------------------------------------------- OTLP/HTTP


def test_the_export_timeout_is_the_backends_setting_in_milliseconds(env: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as stalled:  # accepts (the backlog), never answers
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{stalled.getsockname()[1]}")
        env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", " 150 ")
        forwarder, took = _send_all(("logs", _logs(2)))  # the general timeout: 0.15 s, not the 0.8 s default
        assert forwarder.accounts["logs"].failed == 2 and "Timeout" in forwarder.accounts["logs"].errors[0]
        assert took < 0.7
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500")  # the signal's own wins
        forwarder, took = _send_all(("traces", _spans(1)))
        assert forwarder.accounts["traces"].failed == 1 and 1.4 < took < 8
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon")  # unreadable: the proxy's default (0.8 s)
        forwarder, took = _send_all(("traces", _spans(1)))
        assert forwarder.accounts["traces"].failed == 1 and 0.75 < took < 1.4


def test_headers_are_read_as_other_sdks_read_them(env: pytest.MonkeyPatch) -> None:
    from otlp_backend import Backend

    with Backend() as backend:
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", backend.endpoint)
        env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer a b,X-Tenant=t%201")  # not URL-encoded, and
        forwarder, _ = _send_all(("traces", _spans(1)))
        assert forwarder.accounts["traces"].sent == 1
        ((_, headers, _),) = backend.headers
        assert headers["authorization"] == "Bearer a b" and headers["x-tenant"] == "t 1"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed server certificate for 127.0.0.1, and a self-signed client certificate (its key apart,
    and both in one file)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    where = tmp_path_factory.mktemp("pki")
    for name, subject, extra in (
        ("server", "/CN=127.0.0.1", ["-addext", "subjectAltName=IP:127.0.0.1"]),
        ("client", "/CN=the-agents-proxy", []),
    ):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", subject, *extra,
                 "-keyout", str(where / f"{name}.key"), "-out", str(where / f"{name}.pem"))  # fmt: skip
    (where / "client-both.pem").write_bytes((where / "client.pem").read_bytes() + (where / "client.key").read_bytes())
    return where


class _TlsBackend:
    """OTLP/HTTP over TLS that requires the client certificate: keeps each request's client common name."""

    def __init__(self, pki: Path) -> None:
        self.clients: list[str] = []
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                connection: Any = self.connection  # an ssl.SSLSocket
                peer = connection.getpeercert()
                backend.clients.append(dict(x[0] for x in peer["subject"])["commonName"])
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pki / "server.pem", pki / "server.key")
        context.load_verify_locations(pki / "client.pem")
        context.verify_mode = ssl.CERT_REQUIRED
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.endpoint = f"https://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> _TlsBackend:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_tls_with_the_backends_certificate_and_a_client_certificate(env: pytest.MonkeyPatch, pki: Path) -> None:
    with _TlsBackend(pki) as backend:
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", backend.endpoint)
        forwarder, _ = _send_all(("traces", _spans(1)))  # the system's roots do not know the backend
        assert "CERTIFICATE_VERIFY_FAILED" in forwarder.accounts["traces"].errors[0]
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(pki / "server.pem"))
        forwarder, _ = _send_all(("traces", _spans(1)))  # no client certificate: refused by the backend
        assert forwarder.accounts["traces"].failed == 1 and backend.clients == []
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", str(pki / "client.pem"))
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", str(pki / "client.key"))
        env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pki / "server.pem"))
        env.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(pki / "client-both.pem"))  # key in the same file
        forwarder, _ = _send_all(("traces", _spans(2)), ("logs", _logs(3)))
        assert forwarder.accounts["traces"].sent == 2 and forwarder.accounts["logs"].sent == 3
        assert backend.clients == ["the-agents-proxy"] * 2


# ---------------------------------------------------------------------- OTLP/gRPC


class _Collector(
    trace_service_pb2_grpc.TraceServiceServicer,
    logs_service_pb2_grpc.LogsServiceServicer,
    metrics_service_pb2_grpc.MetricsServiceServicer,
):
    def __init__(self) -> None:
        self.received: list[tuple[str, Any, dict[str, str]]] = []
        self.delay = 0.0

    def _take(self, signal: str, request: Any, context: Any, answer: Any) -> Any:
        time.sleep(self.delay)
        self.received.append((signal, request, dict(context.invocation_metadata())))
        return answer

    def Export(self, request: Any, context: Any) -> Any:  # one name for the three services
        if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
            return self._take("traces", request, context, trace_service_pb2.ExportTraceServiceResponse())
        if isinstance(request, logs_service_pb2.ExportLogsServiceRequest):
            return self._take("logs", request, context, logs_service_pb2.ExportLogsServiceResponse())
        return self._take("metrics", request, context, metrics_service_pb2.ExportMetricsServiceResponse())


@pytest.fixture
def collector(pki: Path) -> Iterator[tuple[_Collector, int, int]]:
    """A gRPC collector on loopback: (servicer, plain port, TLS port)."""
    servicer = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(servicer, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(servicer, server)
    plain = server.add_insecure_port("127.0.0.1:0")
    key, chain = (pki / "server.key").read_bytes(), (pki / "server.pem").read_bytes()
    secure = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, chain)]))
    server.start()
    yield servicer, plain, secure
    server.stop(None)


def test_grpc_sends_each_signal_with_its_headers(
    env: pytest.MonkeyPatch, collector: tuple[_Collector, int, int]
) -> None:
    servicer, plain, _secure = collector
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{plain}/")
    env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "X-Tenant=t1,Authorization=Bearer a b")
    env.setenv("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip")
    env.setenv("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "deflate")
    metrics = metrics_service_pb2.ExportMetricsServiceRequest()
    metrics.resource_metrics.add().scope_metrics.add().metrics.add(name="m")
    forwarder, _ = _send_all(("traces", _spans(2)), ("logs", _logs(3)), ("metrics", metrics))
    assert [a.sent for a in forwarder.accounts.values()] == [2, 1, 3] and forwarder.problems() == []
    assert [(signal, request) for signal, request, _ in servicer.received] == [
        ("traces", _spans(2)),
        ("logs", _logs(3)),
        ("metrics", metrics),
    ]
    for _, _, metadata in servicer.received:
        assert metadata["x-tenant"] == "t1" and metadata["authorization"] == "Bearer a b"


class _Relay:
    """A TCP relay on loopback that counts the bytes the client sends through it."""

    def __init__(self, port: int) -> None:
        self.sent = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._target = port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while data := source.recv(65536):
                self.sent += len(data) if count else 0
                sink.sendall(data)
        except OSError:  # the other direction closed both
            pass
        finally:
            source.close()
            sink.close()

    def close(self) -> None:
        self._server.close()


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
def test_grpc_compresses_as_the_backends_setting_says(
    env: pytest.MonkeyPatch, collector: tuple[_Collector, int, int], compression: str
) -> None:
    servicer, plain, _secure = collector
    big = ExportTraceServiceRequest()
    big.resource_spans.add().scope_spans.add().spans.extend(
        trace_pb2.Span(name="the same name again " * 50) for _ in range(200)
    )  # 200 kB that compress well
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    sizes = {}
    for setting in ("", compression):
        relay = _Relay(plain)
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{relay.port}")
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", setting)
        forwarder, _ = _send_all(("traces", big))
        relay.close()
        assert forwarder.accounts["traces"].sent == 200
        sizes[setting] = relay.sent
    assert [request for _, request, _ in servicer.received] == [big, big]
    assert sizes[""] > big.ByteSize() > 20 * sizes[compression]


def test_grpc_insecure_without_a_scheme(env: pytest.MonkeyPatch, collector: tuple[_Collector, int, int]) -> None:
    servicer, plain, _secure = collector
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"127.0.0.1:{plain}")
    env.setenv("OTEL_EXPORTER_OTLP_INSECURE", " True ")
    forwarder, _ = _send_all(("traces", _spans(1)))
    assert forwarder.accounts["traces"].sent == 1 and len(servicer.received) == 1


def test_grpc_over_tls_with_the_backends_certificate(
    env: pytest.MonkeyPatch, collector: tuple[_Collector, int, int], pki: Path
) -> None:
    servicer, _plain, secure = collector
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://127.0.0.1:{secure}")
    env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
    forwarder, _ = _send_all(("traces", _spans(1)))  # the system's roots do not know the backend
    assert forwarder.accounts["traces"].failed == 1 and forwarder.accounts["traces"].errors[0].startswith("gRPC ")
    assert forwarder.problems()[0].startswith(f"1 of the agent's span not forwarded to https://127.0.0.1:{secure}: ")
    env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pki / "server.pem"))
    forwarder, _ = _send_all(("traces", _spans(2)))
    assert forwarder.accounts["traces"].sent == 2 and len(servicer.received) == 1


def test_grpc_losses_are_counted_and_said(env: pytest.MonkeyPatch, collector: tuple[_Collector, int, int]) -> None:
    servicer, plain, _secure = collector
    servicer.delay = 1.0
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")  # the signal's own settings win
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{plain}")
    env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
    forwarder, took = _send_all(("traces", _spans(2)))  # slower than the timeout: lost
    assert took < 0.9
    assert forwarder.accounts["traces"].failed == 2
    assert forwarder.accounts["traces"].errors == ["gRPC StatusCode.DEADLINE_EXCEEDED"]
    (said,) = forwarder.problems()
    assert said.startswith(f"2 of the agent's spans not forwarded to http://127.0.0.1:{plain}: it did not take them")
    assert "over OTLP/gRPC" in said


def test_settings_that_cannot_be_read_fail_each_export_and_are_said(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:9")
    env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tmp_path / "missing.pem"))
    forwarder, _ = _send_all(*(("traces", _spans(n)) for n in range(1, 7)))
    account = forwarder.accounts["traces"]
    assert account.failed == 21 and account.sent == 0
    assert len(account.errors) == 4 and all(e.startswith("FileNotFoundError: [Errno 2]") for e in account.errors)
