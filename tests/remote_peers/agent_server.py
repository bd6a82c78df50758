"""The tests' agent served over Streamable HTTP and WebSocket (the SDK's ASGI app under uvicorn, loopback).

    python tests/remote_peers/agent_server.py SPANS_FILE [--traced] [--starlette] [--v2]

SPANS_FILE ``-``: no span is written (the load benchmark); the server prints ``SUMMARY {json}`` when it stops:
spans ended, spans still open, traces holding spans of more than one session.

Prints ``PORT <n>`` once listening. ``--traced``: acp-otel instruments the SDK; ``--starlette``: the Starlette
instrumentation traces the app (the HTTP spans ``opentelemetry-instrument`` would add). Every finished span is
appended to SPANS_FILE as a JSON line; on SIGTERM the server stops and writes ``SPANS_FILE.open`` with the
number of spans started but never ended. ``--v2``: ACP v1 and v2 (the SDK's protocol router).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))

from acp_app import TraceAgent, _chunk
from opentelemetry.sdk.trace import SpanProcessor
from span_file_exporter import JsonLinesExporter, make_provider


class OpenSpans(SpanProcessor):
    """Counts spans started and not yet ended."""

    def __init__(self) -> None:
        self.open = 0
        self._lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        with self._lock:
            self.open += 1

    def on_end(self, span: Any) -> None:
        with self._lock:
            self.open -= 1


class SessionCheck(SpanProcessor):
    """Counts ended spans and the traces whose spans name more than one session (cross-talk).

    Only the most recent traces are remembered (a turn's spans all end within seconds), so that the check itself
    does not grow the agent's memory over a long load run.
    """

    RECENT = 4096

    def __init__(self) -> None:
        self.spans = 0
        self.sessions: OrderedDict[int, str] = OrderedDict()
        self.mixed: set[int] = set()
        self._lock = threading.Lock()

    def on_end(self, span: Any) -> None:
        session = (span.attributes or {}).get("gen_ai.conversation.id")
        trace_id = span.context.trace_id
        with self._lock:
            self.spans += 1
            if session is not None and self.sessions.setdefault(trace_id, session) != session:
                self.mixed.add(trace_id)
            if len(self.sessions) > self.RECENT:
                self.sessions.popitem(last=False)


class RemoteAgent(TraceAgent):
    """``TraceAgent`` with session/load and session/resume (each replays one chunk) and a turn that waits."""

    async def initialize(self, protocol_version: int, **kwargs: Any) -> dict[str, Any]:
        result = await super().initialize(protocol_version, **kwargs)
        result["agentCapabilities"] = {"loadSession": True, "sessionCapabilities": {"resume": {}}}
        return result

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any) -> None:
        await self.conn.session_update(session_id=session_id, update=_chunk("replayed"))
        return None

    async def resume_session(self, session_id: str, cwd: str, **kwargs: Any) -> dict[str, Any]:
        return {}

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        text = " ".join(getattr(b, "text", "") or "" for b in prompt or [])
        if "hang" in text:  # a turn that only ends when cancelled (or its connection goes)
            await self.conn.session_update(session_id=session_id, update=_chunk("working"))
            await asyncio.Event().wait()
        return await super().prompt(prompt=prompt, session_id=session_id, **kwargs)


class V2RemoteAgent:
    """An ACP v2 agent: accepts a prompt at once, then streams, runs a tool, asks permission and goes idle."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.work: set[asyncio.Task[Any]] = set()

    async def initialize(self, protocol_version: int, info: Any, capabilities: Any = None, **kw: Any) -> Any:
        return {"protocolVersion": 2, "info": {"name": "v2-agent", "version": "0.2.0"}, "capabilities": {"session": {}}}

    async def new_session(self, cwd: str, **kw: Any) -> Any:
        return {"sessionId": "v2-sess"}

    async def prompt(self, session_id: str, prompt: Any, **kw: Any) -> Any:
        task = asyncio.ensure_future(self._turn(session_id))
        self.work.add(task)
        task.add_done_callback(self.work.discard)
        return {"messageId": "m-1"}

    async def _send(self, session_id: str, update: dict[str, Any]) -> None:
        await self.conn._conn.send_notification("session/update", {"sessionId": session_id, "update": update})

    async def _turn(self, session_id: str) -> None:
        await self._send(session_id, {"sessionUpdate": "state_update", "state": "running"})
        chunk = {"sessionUpdate": "agent_message_chunk", "messageId": "a-1", "content": {"type": "text", "text": "hi"}}
        await self._send(session_id, chunk)
        tool = {"sessionUpdate": "tool_call_update", "toolCallId": "v2-tool", "name": "grep", "kind": "search"}
        await self._send(session_id, {**tool, "status": "pending", "title": "grep"})
        await self.conn._conn.send_request(
            "session/request_permission",
            {
                "sessionId": session_id,
                "title": "May I?",
                "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
                "subject": {"type": "tool_call", "toolCall": {"toolCallId": "v2-tool"}},
            },
        )
        await self._send(session_id, {**tool, "status": "completed"})
        await self._send(session_id, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:  # ours, set in main()
            yield

    return Server


def main() -> None:
    spans_file = sys.argv[1]
    traced = "--traced" in sys.argv
    if spans_file == "-":
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
    else:
        provider = make_provider(JsonLinesExporter(spans_file), "remote-agent")
    counter, check = OpenSpans(), SessionCheck()
    provider.add_span_processor(counter)
    provider.add_span_processor(check)
    if traced:
        from acp_otel import AcpInstrumentor

        AcpInstrumentor().instrument(tracer_provider=provider, flush_on_exit=False)

    import uvicorn
    from acp.http.asgi import create_asgi_app

    if "--v2" in sys.argv:  # ACP v1 and v2, chosen by each connection's initialize
        from acp.experimental.negotiation import AgentProtocolRouter

        app = create_asgi_app(AgentProtocolRouter(v1=RemoteAgent, v2=V2RemoteAgent))
    else:
        app = create_asgi_app(lambda conn: RemoteAgent(conn))
    if "--starlette" in sys.argv:
        from opentelemetry.instrumentation.starlette import StarletteInstrumentor

        StarletteInstrumentor.instrument_app(app, tracer_provider=provider)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made as soon as the port is printed wait in the backlog until uvicorn accepts
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3)
    server = _server_class()(config)
    # Stop on SIGTERM and return from run() (uvicorn's own handling re-raises the signal once it stops).
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        provider.force_flush()
        if spans_file != "-":
            Path(spans_file + ".open").write_text(str(counter.open))
        provider.shutdown()
        summary = {"spans": check.spans, "open": counter.open, "mixed_traces": len(check.mixed)}
        print("SUMMARY " + json.dumps(summary), flush=True)
        print("STOPPED", flush=True)


if __name__ == "__main__":
    main()
