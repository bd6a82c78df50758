"""Shared fixtures: an instrumented tracer provider with an in-memory exporter, a meter provider with an in-memory
reader, and real connections.

The helpers these fixtures use live in ``tests/support`` (on pytest's ``pythonpath``); the programs the
tests start as processes live in ``tests/peers``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spans import SpanCounter

from acp_otel import AcpInstrumentor


@pytest.fixture(autouse=True)
def _nothing_left_instrumented() -> Iterator[None]:
    """Every test leaves the SDK unpatched: a test that forgot to uninstrument fails itself, not later ones."""
    yield
    state = AcpInstrumentor()._state
    assert state.engine is None and state.settings is None, "still instrumented after the test"
    assert len(state.patches) == 0, "SDK attributes still wrapped after the test"


@pytest.fixture(autouse=True, scope="module")
def _no_global_tracer_provider_left() -> Iterator[None]:
    """No test module leaves a global tracer provider behind (reset it with
    ``opentelemetry.test.globals_test.reset_trace_globals``)."""
    yield
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), "a global tracer provider was left set"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    mp = MeterProvider(metric_readers=[reader])
    yield mp
    mp.shutdown()


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
