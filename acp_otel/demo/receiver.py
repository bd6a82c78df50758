"""An embedded OTLP trace receiver bound to loopback.

``OtlpReceiver`` accepts real OTLP exports - OTLP/HTTP (protobuf or JSON, optionally gzip) and OTLP/gRPC -
and decodes them into flat :class:`ReceivedSpan` records. ``acp-otel demo`` uses it to show a trace without
Docker, and integration tests use it to assert on what an instrumented process actually exported.

Example::

    with OtlpReceiver() as receiver:
        env = receiver.exporter_env()  # OTEL_EXPORTER_OTLP_ENDPOINT / _PROTOCOL for a child process
        ...
        spans = receiver.wait_for_spans(count=3, timeout=10)
"""

from __future__ import annotations

import gzip
import http.server
import logging
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

__all__ = [
    "OtlpReceiver",
    "ReceivedSpan",
    "SpanEvent",
    "SpanLink",
    "any_value_to_python",
    "attributes_to_dict",
    "spans_from_resource_spans",
]

LOOPBACK = "127.0.0.1"
TRACES_PATH = "/v1/traces"
# Generous cap so a runaway client cannot make the demo process buffer unbounded data.
MAX_BODY_BYTES = 64 * 1024 * 1024
# An idle keep-alive connection is closed after this many seconds (stop() closes open ones at once).
IDLE_TIMEOUT_S = 30.0
# How long stop() waits for the HTTP connection threads after closing their sockets.
STOP_JOIN_TIMEOUT_S = 5.0
# After an error reply that left the request body unread, the connection is closed "lingering": the rest of
# the body is read and dropped (up to these limits) so that closing does not reset the connection before
# the client has read the reply.
LINGER_S = 2.0
LINGER_BYTES = 4 * 1024 * 1024

_log = logging.getLogger(__name__)


class SpanEvent(NamedTuple):
    """A span event: ``(name, time_unix_nano, attributes)``."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


class SpanLink(NamedTuple):
    """A span link: ``(trace_id, span_id, attributes)`` with lower-case hex ids."""

    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One decoded span, flattened together with its resource and instrumentation scope."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: str = "UNSET"
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    links: list[SpanLink] = field(default_factory=list)
    resource_attributes: dict[str, Any] = field(default_factory=dict)
    service_name: str = ""
    scope_name: str = ""
    scope_version: str = ""

    def __hash__(self) -> int:
        # The generated hash would fail on the dict fields; ids identify a span (equal spans share them).
        return hash((self.trace_id, self.span_id))

    @property
    def duration_ns(self) -> int:
        """Span duration in nanoseconds (never negative)."""
        return max(0, self.end_time_unix_nano - self.start_time_unix_nano)

    @property
    def is_error(self) -> bool:
        """True when the span status is ERROR."""
        return self.status_code == "ERROR"


# --------------------------------------------------------------------------- decoding


def any_value_to_python(value: AnyValue) -> Any:
    """Convert an OTLP ``AnyValue`` into a plain Python value (arrays become lists, kvlists dicts)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value_to_python(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    return getattr(value, which)


def attributes_to_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """Convert repeated OTLP ``KeyValue`` attributes into a dict (last key wins, as in the SDK)."""
    return {kv.key: any_value_to_python(kv.value) for kv in attributes}


def _enum_name(enum_type: Any, value: int, prefix: str) -> str:
    try:
        return enum_type.Name(value).removeprefix(prefix)
    except ValueError:  # a newer sender may use values this proto version doesn't know
        return str(value)


def _span_from_proto(span: Span, resource_attrs: dict[str, Any], scope_name: str, scope_version: str) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        name=span.name,
        kind=_enum_name(Span.SpanKind, span.kind, "SPAN_KIND_"),
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        status_code=_enum_name(Status.StatusCode, span.status.code, "STATUS_CODE_"),
        status_message=span.status.message,
        attributes=attributes_to_dict(span.attributes),
        events=[SpanEvent(e.name, e.time_unix_nano, attributes_to_dict(e.attributes)) for e in span.events],
        links=[SpanLink(ln.trace_id.hex(), ln.span_id.hex(), attributes_to_dict(ln.attributes)) for ln in span.links],
        resource_attributes=dict(resource_attrs),
        service_name=str(resource_attrs.get("service.name", "")),
        scope_name=scope_name,
        scope_version=scope_version,
    )


def spans_from_resource_spans(resource_spans: Iterable[ResourceSpans]) -> list[ReceivedSpan]:
    """Flatten OTLP ``ResourceSpans`` protobufs into :class:`ReceivedSpan` records (in wire order)."""
    out: list[ReceivedSpan] = []
    for rs in resource_spans:
        resource_attrs = attributes_to_dict(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                out.append(_span_from_proto(span, resource_attrs, ss.scope.name, ss.scope.version))
    return out


# --------------------------------------------------------------------------- HTTP transport


class _ClientGone(Exception):
    """The client closed the connection before sending the whole body: nothing to answer."""


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _OtlpHttpHandler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.1 keeps the exporter's pooled connection alive between batches.
    protocol_version = "HTTP/1.1"
    # Socket timeout: an idle keep-alive connection (or a stalled request) does not hold a thread forever.
    timeout = IDLE_TIMEOUT_S
    server: _OtlpHttpServer
    _linger = False

    def log_message(self, fmt: str, *args: Any) -> None:
        """Silence per-request logging; the demo prints its own output."""

    def do_POST(self) -> None:
        """Handle ``POST /v1/traces`` with protobuf or JSON OTLP bodies."""
        body_read = False
        try:
            if self.path.split("?", 1)[0].rstrip("/") != TRACES_PATH:
                raise _HttpError(404, f"only {TRACES_PATH} is served here")
            raw = self._read_body()
            body_read = True
            body = self._decompress(raw)
            content_type = self.headers.get("Content-Type", "application/x-protobuf").split(";", 1)[0].strip()
            if content_type == "application/json":
                self._handle_json(body)
            elif content_type in ("application/x-protobuf", "application/protobuf", "application/octet-stream"):
                self._handle_protobuf(body)
            else:
                raise _HttpError(415, f"unsupported Content-Type {content_type!r}")
        except _ClientGone:
            self.close_connection = True
        except _HttpError as exc:
            # An unread body would be parsed as the next request on this connection: close it instead.
            self._reply(exc.status, "text/plain; charset=utf-8", exc.message.encode(), close=not body_read)

    def do_GET(self) -> None:
        """Answer 405 on the traces path (OTLP is POST only) and 404 elsewhere."""
        status = 405 if self.path.rstrip("/") == TRACES_PATH else 404
        has_body = self.headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in self.headers
        self._reply(status, "text/plain; charset=utf-8", b"POST OTLP traces to /v1/traces\n", close=has_body)

    # -- helpers

    def _handle_protobuf(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as exc:  # protobuf raises DecodeError, but be liberal with garbage input
            raise _HttpError(400, f"cannot decode ExportTraceServiceRequest: {exc}") from exc
        self.server.receiver._ingest(request.resource_spans, "http")
        self._reply(200, "application/x-protobuf", ExportTraceServiceResponse().SerializeToString())

    def _handle_json(self, body: bytes) -> None:
        # Imported lazily: otlp_json imports this module for ReceivedSpan.
        from acp_otel.demo.otlp_json import parse_otlp_json

        try:
            request = parse_otlp_json(body)
        except Exception as exc:
            raise _HttpError(400, f"cannot decode OTLP JSON: {exc}") from exc
        self.server.receiver._ingest(request.resource_spans, "http")
        self._reply(200, "application/json", b"{}")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise _HttpError(411, "Content-Length required")
        try:
            length = int(length_header)
        except ValueError as exc:
            raise _HttpError(400, "bad Content-Length") from exc
        if length < 0 or length > MAX_BODY_BYTES:
            raise _HttpError(413, "request body too large")
        return self._read_exactly(length)

    def _read_exactly(self, length: int) -> bytes:
        data = self.rfile.read(length)
        if len(data) != length:  # EOF: a truncated body must not be decoded (it may even parse)
            raise _ClientGone
        return data

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            size_line = self.rfile.readline(1024)
            if not size_line:
                raise _ClientGone
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise _HttpError(400, "bad chunk size") from exc
            if size == 0:
                # Skip optional trailers up to the terminating blank line.
                while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_BODY_BYTES:
                raise _HttpError(413, "request body too large")
            chunks.append(self._read_exactly(size))
            self.rfile.readline(8)  # CRLF after each chunk

    def _decompress(self, body: bytes) -> bytes:
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        try:
            if encoding == "gzip":
                return gzip.decompress(body)
            if encoding == "deflate":
                return zlib.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise _HttpError(400, f"cannot decompress {encoding} body: {exc}") from exc
        if encoding in ("identity", "none", ""):
            return body
        raise _HttpError(415, f"unsupported Content-Encoding {encoding!r}")

    def _reply(self, status: int, content_type: str, payload: bytes, *, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
            self._linger = True
        self.end_headers()
        self.wfile.write(payload)

    def finish(self) -> None:
        super().finish()
        if self._linger:
            self._drain_and_close()

    def _drain_and_close(self) -> None:
        # Closing a socket with unread input sends a reset, which can destroy the reply in flight. So send
        # our FIN first, then read and drop what the client still sends until it closes its side too.
        sock = self.connection
        try:
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_S
            drained = 0
            while drained < LINGER_BYTES:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                sock.settimeout(remaining)
                data = sock.recv(65536)
                if not data:
                    break
                drained += len(data)
        except OSError:
            pass


class _OtlpHttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Tests start many receivers in quick succession; never fail on a lingering TIME_WAIT.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], receiver: OtlpReceiver) -> None:
        super().__init__(address, _OtlpHttpHandler)
        self.receiver = receiver
        self.thread_name = f"otlp-http-receiver-{self.server_address[1]}-conn"
        # Open connections and the threads serving them, so that stop() can end them.
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a named daemon thread that :meth:`close_connections` can end."""
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), name=self.thread_name, daemon=True
        )
        # Registered here, in the serving thread, so that after shutdown() every started thread is known.
        with self._connections_lock:
            self._connections[request] = thread
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._connections.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log at debug level instead of printing a traceback: a client going away is not our problem."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            _log.debug("OTLP/HTTP client %s went away: %r", client_address, exc)
        else:
            _log.debug("error while serving OTLP/HTTP client %s", client_address, exc_info=True)

    def close_connections(self, timeout: float) -> None:
        """Shut down the sockets of open connections and wait (up to ``timeout`` s) for their threads."""
        with self._connections_lock:
            open_connections = list(self._connections.items())
        for sock, _thread in open_connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading the next request
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for _sock, thread in open_connections:
            thread.join(max(0.0, deadline - time.monotonic()))


# --------------------------------------------------------------------------- receiver


class OtlpReceiver:
    """A real OTLP trace receiver (HTTP and/or gRPC) on loopback with a thread-safe span store.

    Ports default to 0, i.e. the OS picks free ports; read :attr:`http_endpoint` / :attr:`grpc_endpoint`
    after :meth:`start`. Use it as a context manager to stop it reliably.
    """

    def __init__(
        self,
        host: str = LOOPBACK,
        http_port: int = 0,
        grpc_port: int = 0,
        *,
        enable_http: bool = True,
        enable_grpc: bool = True,
    ) -> None:
        """Configure (but do not start) the receiver; at least one protocol must be enabled."""
        if not (enable_http or enable_grpc):
            raise ValueError("enable at least one of HTTP and gRPC")
        self._host = host
        self._http_port_requested = http_port
        self._grpc_port_requested = grpc_port
        self._enable_http = enable_http
        self._enable_grpc = enable_grpc
        self._cond = threading.Condition()
        self._spans: list[ReceivedSpan] = []
        self._resource_spans: list[ResourceSpans] = []
        self._export_counts: dict[str, int] = {"http": 0, "grpc": 0}
        self._http_server: _OtlpHttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc_server: Any = None
        self._http_port: int | None = None
        self._grpc_port: int | None = None

    # -- lifecycle

    def start(self) -> OtlpReceiver:
        """Bind the enabled protocols and start serving in background threads; returns ``self``."""
        if self._http_server is not None or self._grpc_server is not None:
            raise RuntimeError("receiver already started")
        try:
            if self._enable_http:
                self._start_http()
            if self._enable_grpc:
                self._start_grpc()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_http(self) -> None:
        server = _OtlpHttpServer((self._host, self._http_port_requested), self)
        self._http_server = server
        self._http_port = int(server.server_address[1])
        self._http_thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="otlp-http-receiver", daemon=True
        )
        self._http_thread.start()

    def _start_grpc(self) -> None:
        # Imported lazily so an HTTP-only receiver works even where grpcio is not installed.
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                receiver._ingest(request.resource_spans, "grpc")
                return ExportTraceServiceResponse()

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc-receiver"),
            options=[("grpc.max_receive_message_length", MAX_BODY_BYTES)],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(), server)
        port = server.add_insecure_port(f"{self._host}:{self._grpc_port_requested}")
        if port == 0:
            raise OSError(f"cannot bind gRPC receiver on {self._host}:{self._grpc_port_requested}")
        self._grpc_server = server
        self._grpc_port = port
        server.start()

    def stop(self, grace: float = 0.5) -> None:
        """Stop both servers (idempotent). Received spans stay available."""
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()
            self._http_server.close_connections(STOP_JOIN_TIMEOUT_S)
            self._http_server = None
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
            self._http_thread = None
        if self._grpc_server is not None:
            self._grpc_server.stop(grace).wait(timeout=grace + 5)
            self._grpc_server = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- endpoints

    @property
    def http_endpoint(self) -> str:
        """Base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``http/protobuf`` (exporters append ``/v1/traces``)."""
        if self._http_port is None or self._http_server is None:
            raise RuntimeError("HTTP receiver is not running")
        return f"http://{self._host}:{self._http_port}"

    @property
    def http_traces_url(self) -> str:
        """Full traces URL, for ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTLPSpanExporter(endpoint=...)``."""
        return self.http_endpoint + TRACES_PATH

    @property
    def grpc_endpoint(self) -> str:
        """Endpoint for ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` (plaintext)."""
        if self._grpc_port is None or self._grpc_server is None:
            raise RuntimeError("gRPC receiver is not running")
        return f"http://{self._host}:{self._grpc_port}"

    def exporter_env(self, protocol: str = "http/protobuf") -> dict[str, str]:
        """Environment variables that point a standard OTLP exporter at this receiver.

        ``protocol`` is ``"http/protobuf"``, ``"http/json"`` or ``"grpc"``. The result sets both the generic
        and the traces-specific variables so an inherited ``OTEL_EXPORTER_OTLP_TRACES_*`` cannot win.
        """
        if protocol == "grpc":
            endpoint = self.grpc_endpoint
            traces_endpoint = endpoint
        elif protocol in ("http/protobuf", "http/json"):
            endpoint = self.http_endpoint
            traces_endpoint = self.http_traces_url
        else:
            raise ValueError(f"unknown OTLP protocol {protocol!r}")
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_TRACES_EXPORTER": "otlp",
        }

    # -- store

    def _ingest(self, resource_spans: Iterable[ResourceSpans], transport: str) -> None:
        # Stored as they are, without a copy: both transports build a new request message per export and
        # never touch it again, and the store hands out only copies (resource_spans()).
        batch = list(resource_spans)
        decoded = spans_from_resource_spans(batch)
        with self._cond:
            self._spans.extend(decoded)
            self._resource_spans.extend(batch)
            self._export_counts[transport] = self._export_counts.get(transport, 0) + 1
            self._cond.notify_all()

    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        """Snapshot of all received spans in arrival order, optionally only those of ``trace_id``."""
        with self._cond:
            spans = list(self._spans)
        if trace_id is not None:
            spans = [s for s in spans if s.trace_id == trace_id.lower()]
        return spans

    def resource_spans(self) -> list[ResourceSpans]:
        """Return copies of the raw ``ResourceSpans`` protobufs as received (for :func:`write_otlp_json`).

        Copies, so that a caller changing them cannot change the store; the stored messages themselves are
        never modified, so copying outside the lock is safe.
        """
        with self._cond:
            originals = list(self._resource_spans)
        copies = []
        for rs in originals:
            copy = ResourceSpans()
            copy.CopyFrom(rs)
            copies.append(copy)
        return copies

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """Spans grouped by trace id (traces in first-seen order, spans sorted by start time)."""
        grouped: dict[str, list[ReceivedSpan]] = {}
        for span in self.spans():
            grouped.setdefault(span.trace_id, []).append(span)
        for spans in grouped.values():
            spans.sort(key=lambda s: (s.start_time_unix_nano, s.end_time_unix_nano))
        return grouped

    @property
    def export_counts(self) -> Mapping[str, int]:
        """How many export requests arrived per transport (``{"http": n, "grpc": m}``)."""
        with self._cond:
            return dict(self._export_counts)

    def clear(self) -> None:
        """Forget all received spans and counters."""
        with self._cond:
            self._spans.clear()
            self._resource_spans.clear()
            self._export_counts = {"http": 0, "grpc": 0}

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0) -> list[ReceivedSpan]:
        """Block until ``predicate(spans)`` is true; return that snapshot.

        Raises ``TimeoutError`` (listing the span names seen so far) if it does not hold within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                snapshot = list(self._spans)
                if predicate(snapshot):
                    return snapshot
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = sorted({s.name for s in snapshot})
                    raise TimeoutError(
                        f"condition not met within {timeout:.1f}s; received {len(snapshot)} spans: {names}"
                    )
                self._cond.wait(remaining)

    def wait_for_spans(
        self, count: int = 1, timeout: float = 10.0, *, name: str | None = None, trace_id: str | None = None
    ) -> list[ReceivedSpan]:
        """Block until at least ``count`` matching spans arrived (optionally with ``name`` / ``trace_id``).

        Returns the matching spans; raises ``TimeoutError`` otherwise.
        """

        def matching(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
            return [
                s
                for s in spans
                if (name is None or s.name == name) and (trace_id is None or s.trace_id == trace_id.lower())
            ]

        return matching(self.wait_for(lambda spans: len(matching(spans)) >= count, timeout))
