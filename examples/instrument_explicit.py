"""The example client with explicit, in-code tracing: one provider, one ``instrument()`` call.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 python examples/instrument_explicit.py [client.py options]

The exporter speaks OTLP/HTTP and reads the standard ``OTEL_EXPORTER_OTLP_*`` variables
(default endpoint http://localhost:4318/v1/traces). ``OTEL_SERVICE_NAME`` overrides the
default service name. All arguments are passed on to ``examples/client.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from acp_otel import AcpInstrumentor

DEFAULT_SERVICE_NAME = "acp-example-client"


def build_tracer_provider() -> TracerProvider:
    # Resource.create() also picks up OTEL_RESOURCE_ATTRIBUTES; the explicit service.name wins.
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", DEFAULT_SERVICE_NAME)})
    provider = TracerProvider(resource=resource)
    # Batching keeps exporting off the request path; shutdown() below flushes what is left.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def load_client_main() -> Callable[[list[str] | None], Awaitable[int]]:
    # examples/ is not a package: load client.py by path so this works from any working directory.
    spec = importlib.util.spec_from_file_location("example_client", Path(__file__).with_name("client.py"))
    if spec is None or spec.loader is None:
        raise ImportError("cannot load examples/client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def run(argv: list[str] | None = None) -> int:
    provider = build_tracer_provider()
    instrumentor = AcpInstrumentor()
    # The one line that matters. Instrument before any connection is created: some SDK
    # versions bind their dispatch methods when a Connection is constructed.
    instrumentor.instrument(tracer_provider=provider)
    try:
        return asyncio.run(load_client_main()(argv))
    finally:
        instrumentor.uninstrument()
        provider.shutdown()  # flush the batch processor before the process exits


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
