"""OTLP receivers on loopback that keep what they receive and pass the same request on to a backend.

The exporter under test sends to the tee; the tee decodes and keeps the spans, forwards the request
unchanged to the backend (Phoenix's OTLP/HTTP or OTLP/gRPC receiver) and answers with the backend's
outcome. So the backend got exactly what the tee holds, and a test can compare the two span for span.
"""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

LOOPBACK = "127.0.0.1"
_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


@dataclass
class TeeSpan:
    """One span as the exporter sent it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    status: str
    attributes: dict[str, Any]
    events: list[str]
    resource: dict[str, Any] = field(default_factory=dict)
    links: list[tuple[str, str]] = field(default_factory=list)  # (trace id, span id) of each link
    event_attributes: list[dict[str, Any]] = field(default_factory=list)  # each event's, in order
    start_ns: int = 0  # start and end, Unix nanoseconds, as sent
    end_ns: int = 0


class TeeStore:
    """The spans that went through a tee, and the backend's failures (there should be none)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans: list[TeeSpan] = []
        self.errors: list[str] = []
        self.requests = 0

    def keep(self, request: ExportTraceServiceRequest) -> None:
        decoded = []
        for rs in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    decoded.append(
                        TeeSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex() or None,
                            name=span.name,
                            kind=_KINDS.get(span.kind, str(span.kind)),
                            status=_STATUS.get(span.status.code, str(span.status.code)),
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            events=[e.name for e in span.events],
                            resource=resource,
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                            event_attributes=[{kv.key: _value(kv.value) for kv in e.attributes} for e in span.events],
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.spans.extend(decoded)
            self.requests += 1

    def failed(self, message: str) -> None:
        with self._lock:
            self.errors.append(message)

    def snapshot(self) -> list[TeeSpan]:
        with self._lock:
            return list(self.spans)


class HttpTee(TeeStore):
    """OTLP/HTTP (protobuf) on a free loopback port, forwarding to ``forward_url`` (a ``/v1/traces`` URL)."""

    def __init__(self, forward_url: str) -> None:
        super().__init__()
        self.forward_url = forward_url
        tee = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                tee.keep(request)
                status, payload = tee._forward(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-http-tee", daemon=True)

    def _forward(self, body: bytes) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.forward_url, data=body, headers={"Content-Type": "application/x-protobuf"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            self.failed(f"HTTP {exc.code} from {self.forward_url}")
            return exc.code, b""
        except OSError as exc:
            self.failed(f"{self.forward_url}: {exc!r}")
            return 503, b""

    def __enter__(self) -> HttpTee:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def endpoint(self) -> str:
        """The ``OTEL_EXPORTER_OTLP_ENDPOINT`` for ``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``."""
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"


class GrpcTee(TeeStore):
    """OTLP/gRPC (plaintext) on a free loopback port, forwarding to ``target`` (``host:port``)."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self._channel = grpc.insecure_channel(target)
        stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)
        tee = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                tee.keep(request)
                try:
                    return stub.Export(request, timeout=30)
                except grpc.RpcError as exc:
                    tee.failed(f"gRPC {exc.code()} from {target}")  # type: ignore[attr-defined]
                    context.abort(exc.code(), "backend failed")  # type: ignore[attr-defined]
                    raise

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc-tee"))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._server)
        self._port = self._server.add_insecure_port(f"{LOOPBACK}:0")

    def __enter__(self) -> GrpcTee:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(0.5).wait(5)
        self._channel.close()

    @property
    def endpoint(self) -> str:
        """The ``OTEL_EXPORTER_OTLP_ENDPOINT`` for ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` (the default)."""
        return f"http://{LOOPBACK}:{self._port}"
