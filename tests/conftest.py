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

from spans import SpanCounter

from acp_otel import AcpInstrumentor


@pytest.fixture(autouse=True)
def _nothing_left_instrumented() -> Iterator[None]:
    """Every test leaves the SDK unpatched: a test that forgot to uninstrument fails itself, not later ones."""
    yield
    from acp_otel import sdk_adapter, shutdown, spawn

    assert sdk_adapter.current_engine() is None, "still instrumented after the test"
    assert spawn._state is None and shutdown._state is None, "spawn/shutdown hooks still installed"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tp = TracerProvider(resource=Resource.create({"service.name": "test-client"}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


class Instrument:
    """The ``instrument`` fixture's value: call it with options to re-instrument, ``off()`` to uninstrument."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self.instrumentor = AcpInstrumentor()

    def __call__(self, **options: Any) -> AcpInstrumentor:
        self.off()
        self.instrumentor.instrument(tracer_provider=self._provider, **options)
        return self.instrumentor

    def off(self) -> None:
        if self.instrumentor.is_instrumented_by_opentelemetry:
            self.instrumentor.uninstrument()


@pytest.fixture
def instrument(provider: TracerProvider) -> Iterator[Instrument]:
    """Instrument with the test provider; call the fixture value with options to re-instrument."""
    apply = Instrument(provider)
    apply()
    yield apply
    apply.off()


@pytest.fixture
def counter(provider: TracerProvider) -> SpanCounter:
    """Counts the spans the test provider starts and ends (``counter.open``: those not ended yet)."""
    c = SpanCounter()
    provider.add_span_processor(c)
    return c


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
