"""A loopback OTLP/HTTP receiver for the real-agent tests: protobuf and JSON bodies, plain or chunked.

Qwen Code's own exporter posts OTLP/JSON with ``Transfer-Encoding: chunked``; acp-otel posts protobuf with a
length. Spans are decoded into ``otlp_sink.Span`` records; each resource's raw encoded spans are kept too, so
that a test can search every exported byte (names, attributes, events, status, resource) for a canary.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_sink import _KINDS, _STATUS, Span, _value

from acp_otel._demo.otlp_json import _rewrite_ids

_EVENT_ATTRS = "event_attributes"


def _hex_to_base64(value: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(value)).decode() if value else value


class Sink:
    """``with Sink() as sink: sink.env() ...; sink.wait_for(lambda spans: ...)``."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.raw: list[tuple[str, bytes]] = []  # (service.name, encoded ResourceSpans), traces only
        self.other: list[tuple[str, bytes]] = []  # (path, body) of metrics / logs exports
        self.headers: list[tuple[str, dict[str, str]]] = []  # (path, request headers, names lower-cased)
        self.errors: list[str] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                    return b"".join(parts)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_POST(self) -> None:
                body = self._body()
                with sink._lock:
                    sink.headers.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                is_json = "json" in (self.headers.get("Content-Type") or "")
                try:
                    if self.path.endswith("/v1/traces"):
                        request = ExportTraceServiceRequest()
                        if is_json:
                            json_format.Parse(
                                json.dumps(_rewrite_ids(json.loads(body), _hex_to_base64)),
                                request,
                                ignore_unknown_fields=True,
                            )
                        else:
                            request.ParseFromString(body)
                        sink._add(request)
                    else:
                        with sink._lock:
                            sink.other.append((self.path, body))
                except Exception as exc:  # said in the test's failure, not swallowed
                    with sink._lock:
                        sink.errors.append(f"{self.path}: {exc!r}")
                payload = b"{}" if is_json else b""
                self.send_response(200)
                self.send_header("Content-Type", "application/json" if is_json else "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        found, raw = [], []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            service = str(resource.get("service.name"))
            raw.append((service, resource_spans.SerializeToString()))
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
                            service=service,
                            events=[e.name for e in s.events],
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.spans.extend(found)
            self.raw.extend(raw)

    def env(self) -> dict[str, str]:
        """OTEL_* variables that point a process's OTLP/HTTP exporter here, exporting quickly."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }

    def snapshot(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, done: Any, timeout: float = 30.0) -> list[Span]:
        """Wait until ``done(spans)`` is true; the spans (fails with what arrived on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out; errors {self.errors}; got {[(s.service, s.name, s.kind) for s in spans]}"
                )
            time.sleep(0.1)

    def leaks(self, secrets: list[str], services: set[str]) -> list[str]:
        """The secrets found anywhere in the spans exported by ``services`` (names, attributes, events...)."""
        with self._lock:
            raw = [body for service, body in self.raw if service in services]
        return [s for s in secrets for body in raw if s.encode() in body]

    def __enter__(self) -> Sink:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
