"""An SDK client that talks to ``agent_server.py`` over Streamable HTTP or WebSocket, then exits.

    python tests/remote_peers/client.py SPANS_FILE URL SCENARIO [--traced] [--httpx]

``URL``: ``http://127.0.0.1:PORT/acp`` or ``ws://127.0.0.1:PORT/acp``. ``--traced``: acp-otel instruments the
SDK; ``--httpx``: the httpx instrumentation traces the client's HTTP requests (``httpx2``). Spans go to
SPANS_FILE as JSON lines, then ``SPANS_FILE.open`` holds the number of spans never ended. Prints one JSON
line with what the scenario saw. Scenarios: ``turns`` (two turns with a tool call and a permission),
``cancel`` (a turn cancelled by the caller, then a turn), ``load`` (a turn, then a second connection loads and
resumes the session), ``drop`` (the event stream drops in the middle of a turn), ``v2`` (an ACP v2 turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from acp_app import TraceClient, initialize, prompt
from agent_server import OpenSpans
from span_file_exporter import JsonLinesExporter, make_provider


class WatchingClient(TraceClient):
    """Sets ``first_update`` when an update arrives (the turn is under way)."""

    def __init__(self) -> None:
        super().__init__()
        self.first_update = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await super().session_update(session_id=session_id, update=update, **kwargs)
        self.first_update.set()


async def connect(url: str) -> tuple[Any, Any, WatchingClient]:
    from acp import connect_to_agent

    if url.startswith("ws"):
        from acp.ws import create_websocket_stream

        transport = await create_websocket_stream(url)
    else:
        from acp.http import create_http_stream

        transport = create_http_stream(url)
    client = WatchingClient()
    conn = connect_to_agent(client, transport)
    return conn, transport, client


class V2Client:
    """An ACP v2 client: records updates, allows every permission; ``idle`` is set when the turn goes idle."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.idle = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)
        if getattr(update, "state", None) == "idle":
            self.idle.set()

    async def request_permission(self, session_id: str, title: str, options: Any, **kw: Any) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": "allow"}}


async def v2_scenario(url: str) -> dict[str, Any]:
    from acp.experimental import v2
    from acp.http import create_http_stream

    client = V2Client()
    conn = v2.ClientSideConnection(client, create_http_stream(url))
    try:
        await conn.initialize(protocol_version=2, info={"name": "v2-client", "version": "1.0"})
        session = await conn.new_session(cwd="/tmp")
        accepted = await conn.prompt(session_id=session.session_id, prompt=[{"type": "text", "text": "go"}])
        await asyncio.wait_for(client.idle.wait(), 60)
        return {"session": session.session_id, "accepted": accepted.message_id, "updates": len(client.updates)}
    finally:
        await conn.close()


async def scenario(url: str, name: str) -> dict[str, Any]:
    if name == "v2":
        return await v2_scenario(url)
    out: dict[str, Any] = {}
    conn, transport, client = await connect(url)
    try:
        await initialize(conn)
        session_id = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
        out["session"] = session_id
        if name == "turns":
            out["stops"] = [(await prompt(conn, session_id, f"turn {i}")).stop_reason for i in range(2)]
            # The agent's requests (permission, fs) are all answered: the tracing holds none of their spans.
            remote = getattr(conn._conn, "_acp_otel_remote", None)
            out["held_server_spans"] = len(remote.server_spans) if remote is not None else None
        elif name == "cancel":
            task = asyncio.ensure_future(prompt(conn, session_id, "hang"))
            await asyncio.wait_for(client.first_update.wait(), 30)
            task.cancel()
            try:
                await task
                out["cancelled"] = False
            except asyncio.CancelledError:
                out["cancelled"] = True
            out["after"] = (await prompt(conn, session_id, "after")).stop_reason
        elif name == "load":
            out["stops"] = [(await prompt(conn, session_id, "first")).stop_reason]
            conn2, _, client2 = await connect(url)
            try:
                await initialize(conn2)
                await conn2.load_session(cwd="/tmp", session_id=session_id, mcp_servers=[])
                out["replayed"] = len(client2.updates)
                await conn2.resume_session(cwd="/tmp", session_id=session_id)
                out["resumed"] = True
            finally:
                await conn2.close()
        elif name == "drop":
            task = asyncio.ensure_future(prompt(conn, session_id, "hang"))
            await asyncio.wait_for(client.first_update.wait(), 30)
            for stream in list(transport._stream_tasks):  # the event stream drops (as a network failure would)
                stream.cancel()
            try:
                await asyncio.wait_for(task, 30)
                out["error"] = None
            except Exception as exc:
                out["error"] = type(exc).__name__
        else:
            raise SystemExit(f"unknown scenario {name}")
    finally:
        await conn.close()
    return out


def main() -> None:
    spans_file, url, name = sys.argv[1:4]
    provider = make_provider(JsonLinesExporter(spans_file), "remote-client")
    counter = OpenSpans()
    provider.add_span_processor(counter)
    if "--traced" in sys.argv:
        from acp_otel import AcpInstrumentor

        AcpInstrumentor().instrument(tracer_provider=provider, flush_on_exit=False)
    if "--httpx" in sys.argv:
        from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor

        HTTPX2ClientInstrumentor().instrument(tracer_provider=provider)
    try:
        out = asyncio.run(scenario(url, name))
    finally:
        with contextlib.suppress(Exception):
            provider.force_flush()
        Path(spans_file + ".open").write_text(str(counter.open))
        provider.shutdown()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
