"""The user's backend in the agent-telemetry tests: OTLP/HTTP protobuf on loopback, traces, logs and metrics kept
as decoded messages, with the headers of every request (gzip bodies accepted)."""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_REQUESTS: dict[str, Any] = {
    "traces": ExportTraceServiceRequest,
    "logs": ExportLogsServiceRequest,
    "metrics": ExportMetricsServiceRequest,
}


def _value(value: Any) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


class Backend:
    """``with Backend() as backend: ... backend.spans() ...``."""

    def __init__(self) -> None:
        self.requests: dict[str, list[Any]] = {"traces": [], "logs": [], "metrics": []}
        self.headers: list[tuple[str, dict[str, str], Any]] = []  # (signal, headers, request) per request
        self._lock = threading.Lock()
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                signal = self.path.rstrip("/").rsplit("/", 1)[-1]
                message = _REQUESTS[signal]()
                message.ParseFromString(body)
                with backend._lock:
                    backend.requests[signal].append(message)
                    backend.headers.append((signal, {k.lower(): v for k, v in self.headers.items()}, message))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Backend:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[dict[str, Any]]:
        """Every span received, flat: name, ids (hex), attributes, service and relay, links."""
        out = []
        with self._lock:
            requests = list(self.requests["traces"])
        for request in requests:
            for rs in request.resource_spans:
                resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(
                            {
                                "name": s.name,
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent": s.parent_span_id.hex() or None,
                                "attributes": {kv.key: _value(kv.value) for kv in s.attributes},
                                "service": resource.get("service.name"),
                                "resource": resource,
                                "links": [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            }
                        )
        return out

    def logs(self) -> list[dict[str, Any]]:
        out = []
        with self._lock:
            requests = list(self.requests["logs"])
        for request in requests:
            for rl in request.resource_logs:
                resource = {kv.key: _value(kv.value) for kv in rl.resource.attributes}
                for sl in rl.scope_logs:
                    for r in sl.log_records:
                        out.append(
                            {
                                "body": _value(r.body),
                                "trace_id": r.trace_id.hex(),
                                "span_id": r.span_id.hex(),
                                "resource": resource,
                            }
                        )
        return out

    def metric_names(self) -> set[tuple[str, str]]:
        """(service.name, metric name) pairs received."""
        out = set()
        with self._lock:
            requests = list(self.requests["metrics"])
        for request in requests:
            for rm in request.resource_metrics:
                resource = {kv.key: _value(kv.value) for kv in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        out.add((str(resource.get("service.name")), m.name))
        return out

    def wait_for(self, predicate: Callable[[Backend], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.05)
        return predicate(self)
