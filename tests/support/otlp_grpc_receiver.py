"""An OTLP/gRPC trace receiver on loopback, for the tests that export over gRPC.

The demo's receiver (:mod:`acp_otel._demo.receiver`) serves OTLP/HTTP only, which is all the demo sends;
``opentelemetry-test-utils`` has an OTLP/HTTP test server but none for gRPC. This fixture is the gRPC
service from ``opentelemetry-proto`` feeding the demo's :class:`~acp_otel._demo.receiver.SpanStore`, so
both transports are read back the same way.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from acp_otel._demo.receiver import LOOPBACK, SpanStore


class GrpcOtlpReceiver(SpanStore):
    """OTLP/gRPC (plaintext) trace receiver on a free loopback port; use it as a context manager."""

    def __init__(self) -> None:
        super().__init__()
        self._server: Any = None
        self._port = 0

    def __enter__(self) -> GrpcOtlpReceiver:
        store = self

        class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
                store.add(request.resource_spans)
                return ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc-test"))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(), self._server)
        self._port = self._server.add_insecure_port(f"{LOOPBACK}:0")
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(0.5).wait(5)

    @property
    def endpoint(self) -> str:
        """The ``OTEL_EXPORTER_OTLP_ENDPOINT`` for ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``."""
        return f"http://{LOOPBACK}:{self._port}"

    def exporter_env(self) -> dict[str, str]:
        """Environment variables that point a standard OTLP exporter at this receiver over gRPC."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_TRACES_EXPORTER": "otlp",
        }
