"""A minimal OTLP/HTTP (protobuf) receiver on loopback for the proxy tests: spans, and metric names.

Kept apart from ``acp_otel._demo.receiver`` on purpose: the tests only need spans decoded into flat
records, and must not depend on the demo's receiver while it is being reworked.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


@dataclass
class Span:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str | None
    status: str
    description: str
    attributes: dict[str, Any]
    service: str
    events: list[str] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0


class OtlpSink:
    """``with OtlpSink() as sink: env = sink.env(); ...; sink.wait_for(lambda spans: ...)``."""

    def __init__(self, metrics_status: int = 200) -> None:
        """``metrics_status``: what ``/v1/metrics`` answers (405: a backend that takes traces only)."""
        self.spans: list[Span] = []
        self.metrics: list[tuple[str, str]] = []  # (service.name, metric name) per exported data point set
        self.histogram_bounds: dict[str, tuple[float, ...]] = {}  # metric name -> a data point's bucket bounds
        self.requests = 0
        self._lock = threading.Lock()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path.endswith("/v1/metrics") and metrics_status != 200:
                    self.send_response(metrics_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.endswith("/v1/metrics"):
                    metrics_request = ExportMetricsServiceRequest()
                    metrics_request.ParseFromString(body)
                    sink._add_metrics(metrics_request)
                    payload = ExportMetricsServiceResponse().SerializeToString()
                else:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    sink._add(request)
                    payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _add(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(
                        Span(
                            name=s.name,
                            kind=_KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex() or None,
                            status=_STATUS.get(s.status.code, str(s.status.code)),
                            description=s.status.message,
                            attributes={kv.key: _value(kv.value) for kv in s.attributes},
                            service=str(resource.get("service.name")),
                            events=[e.name for e in s.events],
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(found)

    def _add_metrics(self, request: ExportMetricsServiceRequest) -> None:
        with self._lock:
            for resource_metrics in request.resource_metrics:
                resource = {kv.key: _value(kv.value) for kv in resource_metrics.resource.attributes}
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        self.metrics.append((str(resource.get("service.name")), metric.name))
                        for point in metric.histogram.data_points if metric.HasField("histogram") else ():
                            self.histogram_bounds[metric.name] = tuple(point.explicit_bounds)

    def env(self) -> dict[str, str]:
        """OTEL_* variables that point a process's OTLP/HTTP exporter here, exporting quickly."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }

    def for_agent(self, *command: str) -> list[str]:
        """``command`` behind ``acp-otel proxy`` exporting here itself: the proxy keeps its exporter settings to
        itself, so the agent is given its endpoint in its own command line (``env VAR=VALUE CMD``)."""
        endpoint, protocol = (f"{k}={v}" for k, v in self.env().items() if k.startswith("OTEL_EXPORTER_OTLP_"))
        return ["env", endpoint, protocol, *command]

    def wait_for(self, done: Any, timeout: float = 15.0) -> list[Span]:
        """Wait until ``done(spans)`` is true; the spans (fails with what arrived on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; got {[(s.service, s.name, s.kind) for s in spans]}")
            time.sleep(0.05)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
