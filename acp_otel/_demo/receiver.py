"""The demo's OTLP trace receiver: OTLP/HTTP with protobuf bodies, on loopback.

``acp-otel demo`` points both traced processes at an :class:`OtlpReceiver` (with
``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``, which the runner sets) and decodes what arrives into flat
:class:`ReceivedSpan` records for the waterfall. It serves exactly that: ``POST /v1/traces`` with an
``ExportTraceServiceRequest`` body (gzip-compressed or not, as ``OTEL_EXPORTER_OTLP_COMPRESSION`` says).
Other OTLP transports (gRPC, JSON) are not served: the demo never sends them.

Example::

    with OtlpReceiver() as receiver:
        env = receiver.exporter_env()  # OTEL_EXPORTER_OTLP_* for a child process
        ...
        spans = receiver.wait_for(lambda spans: len(spans) >= 3, timeout=10)
"""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Callable, Iterable
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
    "SpanStore",
    "any_value_to_python",
    "attributes_to_dict",
    "spans_from_resource_spans",
]

LOOPBACK = "127.0.0.1"
TRACES_PATH = "/v1/traces"
# Cap on one request body, so that a runaway client cannot make the demo buffer unbounded data.
MAX_BODY_BYTES = 64 * 1024 * 1024


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
        return str(enum_type.Name(value)).removeprefix(prefix)
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


# --------------------------------------------------------------------------- store


class SpanStore:
    """Received spans, thread-safe: exports add to it, readers take snapshots or wait for a condition."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._spans: list[ReceivedSpan] = []
        self._resource_spans: list[ResourceSpans] = []
        self._export_count = 0

    def add(self, resource_spans: Iterable[ResourceSpans]) -> None:
        """Store one export request's ``ResourceSpans`` (kept as they are: nobody changes them later)."""
        batch = list(resource_spans)
        decoded = spans_from_resource_spans(batch)
        with self._cond:
            self._spans.extend(decoded)
            self._resource_spans.extend(batch)
            self._export_count += 1
            self._cond.notify_all()

    @property
    def export_count(self) -> int:
        """How many export requests arrived."""
        with self._cond:
            return self._export_count

    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        """Snapshot of the received spans in arrival order, optionally only those of ``trace_id``."""
        with self._cond:
            spans = list(self._spans)
        if trace_id is not None:
            spans = [s for s in spans if s.trace_id == trace_id.lower()]
        return spans

    def resource_spans(self) -> list[ResourceSpans]:
        """Copies of the received ``ResourceSpans`` protobufs (for ``otlp_json.write_otlp_json``)."""
        with self._cond:
            originals = list(self._resource_spans)
        copies = []
        for rs in originals:
            copy = ResourceSpans()
            copy.CopyFrom(rs)
            copies.append(copy)
        return copies

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0) -> list[ReceivedSpan]:
        """Block until ``predicate(spans)`` holds and return that snapshot; ``TimeoutError`` after ``timeout`` s."""
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


# --------------------------------------------------------------------------- HTTP receiver


class _Handler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.0 (the default): one request per connection, so stop() has no idle keep-alive connection to
    # end; the exporter's connection pool notices the close and reconnects for its next batch.
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging; the demo prints its own output."""

    def do_POST(self) -> None:
        """Store an ``ExportTraceServiceRequest`` posted to ``/v1/traces``."""
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_BODY_BYTES:
            self.send_error(413)
            return
        # Read the body before any reply: closing with unread input could reset the reply away.
        body = self.rfile.read(length)
        if self.path.split("?", 1)[0] != TRACES_PATH:
            self.send_error(404)
            return
        request = ExportTraceServiceRequest()
        try:
            if self.headers.get("Content-Encoding", "").strip().lower() == "gzip":
                body = gzip.decompress(body)
            request.ParseFromString(body)
        except Exception:  # a bad gzip stream or protobuf: the sender's fault, answer it and go on
            self.send_error(400, "not a (gzip) protobuf ExportTraceServiceRequest")
            return
        self.server.store.add(request.resource_spans)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: SpanStore) -> None:
        super().__init__(address, _Handler)
        self.store = store

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Say nothing: a client that goes away mid-request is not the demo's problem."""


class OtlpReceiver(SpanStore):
    """An OTLP/HTTP (protobuf) trace receiver on a free loopback port, storing what it receives.

    Use it as a context manager; read :attr:`http_endpoint` while it runs.
    """

    def __init__(self, host: str = LOOPBACK, port: int = 0) -> None:
        """Configure (but do not start) the receiver; port 0 lets the OS pick a free one."""
        super().__init__()
        self._address = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> OtlpReceiver:
        """Bind and serve in a background thread; returns ``self``."""
        if self._server is not None:
            raise RuntimeError("receiver already started")
        self._server = _Server(self._address, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (idempotent); the received spans stay available."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def http_endpoint(self) -> str:
        """Base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (exporters append ``/v1/traces``)."""
        if self._server is None:
            raise RuntimeError("the receiver is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def http_traces_url(self) -> str:
        """Full traces URL, for ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTLPSpanExporter(endpoint=...)``."""
        return self.http_endpoint + TRACES_PATH

    def exporter_env(self) -> dict[str, str]:
        """Environment variables that point a standard OTLP exporter at this receiver over ``http/protobuf``.

        Both the generic and the traces-specific variables are set, so an inherited
        ``OTEL_EXPORTER_OTLP_TRACES_*`` cannot win.
        """
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.http_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.http_traces_url,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
        }
