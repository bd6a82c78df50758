"""Forward the agent's own telemetry to the user's backend, as the proxy's own exporter configuration says.

Per signal (traces, metrics, logs): forwarded only when the proxy's own exporter of that signal is ``otlp``
(``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``, ``OTEL_LOGS_EXPORTER``, each ``otlp`` when unset); to
``OTEL_EXPORTER_OTLP_[SIGNAL_]ENDPOINT`` over ``OTEL_EXPORTER_OTLP_[SIGNAL_]PROTOCOL`` (``http/protobuf``, or
``grpc``), with ``_HEADERS``, ``_COMPRESSION`` (gzip, deflate), ``_TIMEOUT`` and ``_CERTIFICATE`` /
``_CLIENT_KEY`` / ``_CLIENT_CERTIFICATE`` (and ``_INSECURE`` for gRPC), the variables the OTLP exporters read.
The request goes out as it came (joined, scrubbed), one export each, in one thread of its own, from a bounded
queue: a full queue drops the request (never blocks the receiver, hence never the relay); a failed export is not
retried. Both are counted, and :meth:`Forwarder.problems` says them in the proxy's one exit line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from collections import deque
from typing import Any

from .otlp_codec import LOGS, METRICS, TRACES
from .telemetry import EXPORT_TIMEOUT_S, otlp_endpoint, otlp_protocol, why_not_exported

_log = logging.getLogger("acp_otel")

MAX_QUEUED = 256
"""Export requests waiting at once; past this the newest is dropped."""
RELAY_ATTRIBUTE = "acp.relay.service.name"
"""Resource attribute added to what is forwarded: the ``service.name`` of the proxy it came through."""
_EXPORTERS = {TRACES: "OTEL_TRACES_EXPORTER", METRICS: "OTEL_METRICS_EXPORTER", LOGS: "OTEL_LOGS_EXPORTER"}
_WHAT = {TRACES: ("span", "spans"), METRICS: ("metric export", "metric exports"), LOGS: ("log record", "log records")}


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _setting(signal: str, name: str) -> str:
    return _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}") or _env(f"OTEL_EXPORTER_OTLP_{name}")


def forwarded_signals() -> tuple[str, ...]:
    """The signals whose proxy exporter is ``otlp`` (unless ``OTEL_SDK_DISABLED``)."""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return ()
    out = []
    for signal, variable in _EXPORTERS.items():
        names = {n.strip().lower() for n in (_env(variable) or "otlp").split(",")}
        if "otlp" in names:
            out.append(signal)
    return tuple(out)


def count_items(signal: str, message: Any) -> int:
    """Spans or log records in an export request; 1 for a metrics request (counted per export)."""
    if signal == TRACES:
        return sum(len(ss.spans) for rs in message.resource_spans for ss in rs.scope_spans)
    if signal == LOGS:
        return sum(len(sl.log_records) for rl in message.resource_logs for sl in rl.scope_logs)
    return 1


def mark_relay(signal: str, message: Any, relay_name: str) -> None:
    """Add :data:`RELAY_ATTRIBUTE` to every resource of ``message``."""
    entries = {TRACES: "resource_spans", METRICS: "resource_metrics", LOGS: "resource_logs"}[signal]
    for entry in getattr(message, entries):
        attributes = entry.resource.attributes
        if not any(kv.key == RELAY_ATTRIBUTE for kv in attributes):
            attributes.add(key=RELAY_ATTRIBUTE).value.string_value = relay_name


class _Account:
    __slots__ = ("dropped", "errors", "failed", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0  # items in exports that failed
        self.dropped = 0  # items dropped: queue full, or not sent before the exit bound
        self.errors: list[str] = []


class Forwarder:
    """A bounded queue of export requests and the thread that sends them (see the module's docstring)."""

    def __init__(self, max_queued: int = MAX_QUEUED) -> None:
        self._queue: deque[tuple[str, Any, int]] = deque()
        self._max = max_queued
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self.accounts = {signal: _Account() for signal in (TRACES, METRICS, LOGS)}
        self._senders: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, name="acp-otel-forwarder", daemon=True)
        self._thread.start()

    def put(self, signal: str, message: Any) -> None:
        """Queue ``message`` (never blocks; a full queue drops it, counted)."""
        items = count_items(signal, message)
        with self._cond:
            if self._closing or len(self._queue) >= self._max:
                self.accounts[signal].dropped += items
                return
            self._queue.append((signal, message, items))
            self._cond.notify()

    def close(self, deadline: float) -> bool:
        """Send what is queued until ``deadline`` (monotonic); what is left then is counted as dropped.
        ``True``: everything was sent (or failed) in time."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            while (self._queue or self._busy) and time.monotonic() < deadline:
                self._cond.wait(max(0.0, min(0.05, deadline - time.monotonic())))
            done = not self._queue and not self._busy
            while self._queue:
                signal, _message, items = self._queue.popleft()
                self.accounts[signal].dropped += items
            return done

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._closing:
                        return
                    self._cond.wait()
                signal, message, items = self._queue.popleft()
                self._busy = True
            try:
                self._send(signal, message, items)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, signal: str, message: Any, items: int) -> None:
        account = self.accounts[signal]
        try:
            sender = self._senders.get(signal)
            if sender is None:
                sender = self._senders[signal] = _sender(signal)
            error = sender(message)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            account.sent += items
        else:
            account.failed += items
            if len(account.errors) < 4:
                account.errors.append(error)
            _log.debug("acp_otel proxy: forwarding the agent's %s failed: %s", signal, error)

    def problems(self) -> list[str]:
        """What was not forwarded, one sentence per signal (probes the endpoint: call it at exit only)."""
        found = []
        for signal, account in self.accounts.items():
            lost = account.failed + account.dropped
            if not lost:
                continue
            one, many = _WHAT[signal]
            what = f"{lost} of the agent's {one if lost == 1 else many}"
            endpoint, _default = otlp_endpoint(signal.upper())
            if account.failed:
                why = why_not_exported(endpoint, otlp_protocol(signal.upper()), account.errors)
                found.append(f"{what} not forwarded to {endpoint}: {why}")
            else:
                found.append(f"{what} not forwarded to {endpoint}: the queue was full or the exit bound came first")
        return found


def _sender(signal: str) -> Any:
    """A function that exports one request of ``signal`` and returns ``None`` or the error (one line)."""
    endpoint, _default = otlp_endpoint(signal.upper())
    timeout_text = _setting(signal, "TIMEOUT")
    try:
        timeout = float(timeout_text) / 1000.0 if timeout_text else EXPORT_TIMEOUT_S
    except ValueError:
        timeout = EXPORT_TIMEOUT_S
    from opentelemetry.util.re import parse_env_headers

    headers = dict(parse_env_headers(_setting(signal, "HEADERS"), liberal=True))
    compression = _setting(signal, "COMPRESSION").lower()
    if otlp_protocol(signal.upper()) == "grpc":
        return _grpc_sender(signal, endpoint, headers, compression, timeout)
    import requests

    session = requests.Session()
    session.headers.update(headers)
    session.headers["Content-Type"] = "application/x-protobuf"
    certificate = _setting(signal, "CERTIFICATE")
    client_cert, client_key = _setting(signal, "CLIENT_CERTIFICATE"), _setting(signal, "CLIENT_KEY")
    verify: Any = certificate or True
    cert: Any = (client_cert, client_key) if client_cert and client_key else (client_cert or None)

    def send(message: Any) -> str | None:
        body = message.SerializeToString()
        extra = {}
        if compression == "gzip":
            import gzip

            body, extra = gzip.compress(body), {"Content-Encoding": "gzip"}
        elif compression == "deflate":
            body, extra = zlib.compress(body), {"Content-Encoding": "deflate"}
        try:
            answer = session.post(endpoint, data=body, headers=extra, timeout=timeout, verify=verify, cert=cert)
        except requests.RequestException as exc:
            return f"{type(exc).__name__}: {exc}"
        if answer.ok:
            return None
        return f"code: {answer.status_code}, reason: {answer.reason}"

    return send


def _grpc_sender(signal: str, endpoint: str, headers: dict[str, str], compression: str, timeout: float) -> Any:
    import importlib

    grpc: Any = importlib.import_module("grpc")  # no type stubs
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    target = endpoint.split("://", 1)[-1].rstrip("/")
    insecure = endpoint.startswith("http://") or _setting(signal, "INSECURE").lower() == "true"
    if insecure:
        channel = grpc.insecure_channel(target)
    else:
        certificate = _setting(signal, "CERTIFICATE")
        root = open(certificate, "rb").read() if certificate else None
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root))
    stub_class: Any = {
        TRACES: trace_service_pb2_grpc.TraceServiceStub,
        METRICS: metrics_service_pb2_grpc.MetricsServiceStub,
        LOGS: logs_service_pb2_grpc.LogsServiceStub,
    }[signal]
    stub = stub_class(channel)
    metadata = tuple((k.lower(), v) for k, v in headers.items())
    grpc_compression = {"gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}.get(compression)

    def send(message: Any) -> str | None:
        try:
            stub.Export(message, metadata=metadata, timeout=timeout, compression=grpc_compression)
        except grpc.RpcError as exc:
            return f"gRPC {exc.code() if hasattr(exc, 'code') else exc}"
        return None

    return send
