"""Shared fixtures: an instrumented tracer provider with an in-memory exporter, and real connections."""

from __future__ import annotations

import asyncio
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


class Pair:
    """A real client and agent connected by a loopback TCP stream (real NDJSON bytes both ways)."""

    def __init__(self, agent: Any, client: Any) -> None:
        self.agent = agent
        self.client = client
        self.client_conn: Any = None
        self.agent_conn: Any = None
        self._server: asyncio.AbstractServer | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> Pair:
        from acp import AgentSideConnection, ClientSideConnection

        ready = asyncio.Event()

        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.append(writer)
            self.agent_conn = AgentSideConnection(lambda conn: self.agent, writer, reader)
            ready.set()

        self._server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self._writers.append(writer)
        self.client_conn = ClientSideConnection(lambda conn: self.client, writer, reader)
        await asyncio.wait_for(ready.wait(), 5)
        return self

    async def close(self) -> None:
        for conn in (self.client_conn, self.agent_conn):
            if conn is not None:
                try:
                    await asyncio.wait_for(conn.close(), 5)
                except Exception:
                    pass
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def pair() -> AsyncIterator[Any]:
    """Factory: ``await pair(agent, client)`` gives a started :class:`Pair`, closed after the test."""
    pairs: list[Pair] = []

    async def make(agent: Any = None, client: Any = None) -> Pair:
        from acp_app import TraceAgent, TraceClient

        p = await Pair(agent or TraceAgent(), client or TraceClient()).start()
        pairs.append(p)
        return p

    yield make
    for p in pairs:
        await p.close()
