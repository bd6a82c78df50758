"""Shared fixtures: an instrumented tracer provider with an in-memory exporter, and real connections."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from acp_otel import AcpInstrumentor


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider(resource=Resource.create({"service.name": "test-client"}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


@pytest.fixture
def instrument(provider: TracerProvider) -> Iterator[Any]:
    """Instrument with the test provider; call the fixture value with options to re-instrument."""
    instrumentor = AcpInstrumentor()

    def apply(**options: Any) -> AcpInstrumentor:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        instrumentor.instrument(tracer_provider=provider, **options)
        return instrumentor

    apply()
    yield apply
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


@pytest.fixture
async def pair() -> AsyncIterator[Any]:
    """Factory: ``await pair(agent, client)`` gives a started ``acp_app.Pair``, closed after the test."""
    pairs: list[Any] = []

    async def make(agent: Any = None, client: Any = None) -> Any:
        from acp_app import Pair, TraceAgent, TraceClient

        p = await Pair(agent or TraceAgent(), client or TraceClient()).start()
        pairs.append(p)
        return p

    yield make
    for p in pairs:
        await p.close()
