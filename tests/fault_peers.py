"""Peer processes for the fault tests.

``python fault_peers.py agent``: TraceAgent over stdio, instrumented, spans to a BatchSpanProcessor with an
OTLP/HTTP exporter (endpoint and timeouts from the standard OTEL_* variables).

``python fault_peers.py client PORT``: a client that connects to an agent on 127.0.0.1:PORT, starts a prompt
turn and dies (``os._exit``) as soon as the agent asks it for permission.
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_agent() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from acp_otel import AcpInstrumentor

    provider = TracerProvider(resource=Resource.create({"service.name": "fault-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    AcpInstrumentor().instrument(tracer_provider=provider)

    import acp
    from acp_app import TraceAgent

    try:
        asyncio.run(acp.run_agent(TraceAgent()))
    finally:
        provider.shutdown()


class DyingClient:
    def __init__(self) -> None:
        from acp_app import TraceClient

        self._inner = TraceClient()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def request_permission(self, **kwargs):
        sys.stdout.flush()
        os._exit(4)  # the client process dies with the agent's request pending


async def run_client(port: int) -> None:
    from acp import ClientSideConnection
    from acp_app import initialize, prompt

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = ClientSideConnection(lambda c: DyingClient(), writer, reader)
    await initialize(conn)
    session = await conn.new_session(cwd="/tmp", mcp_servers=[])
    await prompt(conn, session.session_id, "hello")


if __name__ == "__main__":
    if sys.argv[1] == "agent":
        run_agent()
    else:
        asyncio.run(run_client(int(sys.argv[2])))
