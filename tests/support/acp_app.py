"""A small real ACP agent and client on the SDK, used by the tests in process and, through
``tests/peers/trace_agent.py``, as a spawned process.

Handlers use keyword arguments only, because the SDK's positional order changed between releases.
The prompt text chooses what the agent does, so one agent serves every scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from acp import AgentSideConnection, ClientSideConnection
from acp.exceptions import RequestError

PROTOCOL_VERSION = 1
SECRET = "TOP-SECRET-PROMPT-CONTENT"
FILE_BODY = "FILE-BODY-SECRET"
SECRET_PATH = "/tmp/secret-path-SECRETPATH.txt"


def _text_of(prompt: Any) -> str:
    parts = []
    for block in prompt or []:
        text = getattr(block, "text", None)
        if text is None and isinstance(block, dict):
            text = block.get("text")
        if text:
            parts.append(text)
    return " ".join(parts)


def _chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


class TraceAgent:
    """An agent whose prompt turn calls back into the client, streams updates and can fail on demand."""

    def __init__(self, conn: Any = None) -> None:
        self.conn = conn
        self.init_kwargs: dict[str, Any] = {}
        self.ext_notes: list[tuple[str, dict[str, Any]]] = []
        self.cancelled = asyncio.Event()
        self.waiting = asyncio.Event()  # a "slow" prompt is in the handler, waiting for session/cancel
        self.sessions = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        self.init_kwargs = dict(kwargs)
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {"loadSession": False, "_meta": {"test.dev/agentThing": {"on": True}}},
            "agentInfo": {"name": "test-agent", "version": "2.0.0"},
        }

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.sessions += 1
        return {"sessionId": f"sess-{self.sessions}"}

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "test.dev/ping":
            return {"pong": True, "sawMeta": sorted((params.get("_meta") or {}).keys())}
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.ext_notes.append((method, params))

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        text = _text_of(prompt)
        conn = self.conn
        if "fail" in text:
            raise ValueError(f"handler blew up: {SECRET}")
        if "rpcerror" in text:
            raise RequestError.invalid_params({"secret": SECRET})
        if "slow" in text:
            self.waiting.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.cancelled.wait(), timeout=30)
            return {"stopReason": "cancelled"}
        if "exit" in text:
            os._exit(3)  # the peer process dies with the request pending
        if "echo-meta" in text:  # the _meta keys the handler got as keyword arguments, sent back
            seen = {k: v for k, v in kwargs.items() if isinstance(v, str)}
            return {"stopReason": "end_turn", "_meta": {"kwargs": seen}}
        if "missing-ext" in text:
            try:
                await conn.ext_method("test.dev/missing", {"q": 1})
            except RequestError as exc:
                return {"stopReason": "end_turn", "_meta": {"code": exc.code}}
            return {"stopReason": "refusal"}
        await conn.session_update(session_id=session_id, update=_chunk("Hello "))
        await conn.session_update(session_id=session_id, update=_chunk(SECRET))
        await conn.session_update(
            session_id=session_id,
            update={
                "sessionUpdate": "tool_call",
                "toolCallId": "call-1",
                "title": f"Read {SECRET}",
                "kind": "read",
                "status": "pending",
                "rawInput": {"secret": SECRET},
            },
        )
        permission = await conn.request_permission(
            session_id=session_id,
            tool_call={"toolCallId": "call-1", "title": f"Read {SECRET}", "status": "pending"},
            options=[{"optionId": "allow", "name": "Allow once", "kind": "allow_once"}],
        )
        body = await conn.read_text_file(session_id=session_id, path=SECRET_PATH)
        ext = await conn.ext_method("test.dev/echo", {"value": 42, "_meta": {"test.dev/flag": True}})
        await conn.ext_notification("test.dev/note", {"n": 1})
        await conn.session_update(
            session_id=session_id,
            update={"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "completed"},
        )
        outcome = getattr(getattr(permission, "outcome", None), "outcome", None)
        assert body.content == FILE_BODY and ext.get("echo") == 42 and outcome == "selected"
        return {"stopReason": "end_turn"}


# Tool call scripts (ToolAgent): session/update payloads, ("permission", toolCall) and ("request", method, params),
# sent raw in order (sessionId added). They reproduce what real agents send (DESIGN.md §7).
TERMINAL_ID = "term-1"
TOOL_SCRIPTS: dict[str, list[Any]] = {
    # Codex: asks permission before it announces the tool call.
    "codex": [
        ("permission", {"toolCallId": "call_3", "status": "pending", "kind": "execute", "title": "cat notes.txt"}),
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_3",
            "status": "in_progress",
            "kind": "execute",
            "title": "cat notes.txt",
        },
        {"sessionUpdate": "tool_call_update", "toolCallId": "call_3", "status": "completed"},
    ],
    # kimi: no kind, no name; the first title is the bare tool name, later ones add arguments; fs/* and
    # terminal/* requests while the tool call runs, the terminal embedded in the tool call's content.
    "kimi": [
        {"sessionUpdate": "tool_call", "toolCallId": "k/call_1", "status": "in_progress", "title": "ReadFile"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "k/call_1", "title": "ReadFile: notes.txt"},
        ("request", "fs/read_text_file", {"path": SECRET_PATH}),
        {"sessionUpdate": "tool_call_update", "toolCallId": "k/call_1", "status": "completed"},
        {"sessionUpdate": "tool_call", "toolCallId": "k/call_2", "status": "in_progress", "title": "Shell"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "k/call_2", "title": "Shell: ls"},
        ("request", "terminal/create", {"command": "ls"}),
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "k/call_2",
            "content": [{"type": "terminal", "terminalId": TERMINAL_ID}],
        },
        ("request", "terminal/wait_for_exit", {"terminalId": TERMINAL_ID}),
        ("request", "terminal/output", {"terminalId": TERMINAL_ID}),
        ("request", "terminal/release", {"terminalId": TERMINAL_ID}),
        {"sessionUpdate": "tool_call_update", "toolCallId": "k/call_2", "status": "completed"},
    ],
    # Two tool calls open at once: a terminal request goes by its terminalId, anything else to the turn; once
    # the terminal's tool call has ended, its requests go to the turn even when another tool call is open alone.
    "two-open": [
        {"sessionUpdate": "tool_call", "toolCallId": "a", "status": "in_progress", "kind": "execute", "title": "x"},
        {"sessionUpdate": "tool_call", "toolCallId": "b", "status": "in_progress", "kind": "read", "title": "y"},
        ("request", "terminal/create", {"command": "ls"}),  # 2 open, no terminalId known yet: the turn
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "a",
            "content": [{"type": "terminal", "terminalId": TERMINAL_ID}],
        },
        ("request", "terminal/output", {"terminalId": TERMINAL_ID}),  # by its terminalId: a
        ("request", "fs/read_text_file", {"path": SECRET_PATH}),  # 2 open: the turn
        {"sessionUpdate": "tool_call_update", "toolCallId": "b", "status": "completed"},
        ("request", "fs/write_text_file", {"path": SECRET_PATH, "content": "x"}),  # 1 open: a
        {"sessionUpdate": "tool_call_update", "toolCallId": "a", "status": "completed"},
        {"sessionUpdate": "tool_call", "toolCallId": "c", "status": "in_progress", "kind": "read", "title": "z"},
        # Its tool call ended: the turn, not the one tool call open now (which has nothing to do with it).
        ("request", "terminal/release", {"terminalId": TERMINAL_ID}),
        {"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed"},
    ],
}


class ToolAgent(TraceAgent):
    """Runs the tool call script the prompt text names (``TOOL_SCRIPTS``), or the script it was given."""

    def __init__(self, script: list[Any] | None = None) -> None:
        super().__init__()
        self.script = script

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        script = self.script if self.script is not None else TOOL_SCRIPTS[_text_of(prompt).strip()]
        raw = self.conn._conn  # raw: the messages reach the wire exactly as a foreign agent writes them
        for step in script:
            if isinstance(step, dict):
                await raw.send_notification("session/update", {"sessionId": session_id, "update": step})
            elif step[0] == "permission":
                options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
                params = {"sessionId": session_id, "toolCall": step[1], "options": options}
                await raw.send_request("session/request_permission", params)
            else:
                await raw.send_request(step[1], {"sessionId": session_id, **step[2]})
        return {"stopReason": "end_turn"}


class NoKwargsAgent(TraceAgent):
    """An agent whose initialize has no ``**kwargs``: any unexpected ``_meta`` key breaks it."""

    async def initialize(  # type: ignore[override]
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None
    ) -> dict[str, Any]:
        return {"protocolVersion": PROTOCOL_VERSION, "agentCapabilities": {}}


class TraceClient:
    """A client that answers the agent's callbacks and records what it was sent."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.ext_notes: list[tuple[str, dict[str, Any]]] = []
        self.ext_params: list[dict[str, Any]] = []
        self.conn: Any = None
        self.permission_delay = 0.0  # seconds the "user" takes to decide

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, options: Any, session_id: str, tool_call: Any, **kwargs: Any) -> dict[str, Any]:
        if self.permission_delay:
            await asyncio.sleep(self.permission_delay)
        first = options[0]
        option_id = getattr(first, "option_id", None) or first["optionId"]
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        return {"content": FILE_BODY}

    async def write_text_file(self, **kwargs: Any) -> None:
        return None

    async def create_terminal(self, **kwargs: Any) -> dict[str, Any]:
        return {"terminalId": TERMINAL_ID}

    async def terminal_output(self, **kwargs: Any) -> dict[str, Any]:
        return {"output": "notes.txt\n", "truncated": False}

    async def wait_for_terminal_exit(self, **kwargs: Any) -> dict[str, Any]:
        return {"exitCode": 0}

    async def release_terminal(self, **kwargs: Any) -> dict[str, Any]:
        return {}

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "test.dev/echo":
            self.ext_params.append(params)
            return {"echo": params["value"]}
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.ext_notes.append((method, params))


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
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)
        if self._server is not None:
            self._server.close()


CLIENT_CAPABILITIES = {"fs": {"readTextFile": True}, "_meta": {"test.dev/buffers": {"list": True}}}
CLIENT_INFO = {"name": "test-client", "version": "1.0.0"}


async def initialize(conn: Any) -> Any:
    """Send initialize with the test client's info and capabilities (as plain dicts, valid everywhere)."""
    from acp import schema

    return await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=schema.ClientCapabilities.model_validate(CLIENT_CAPABILITIES),
        client_info=schema.Implementation.model_validate(CLIENT_INFO),
    )


async def open_session(conn: Any) -> str:
    """Initialize and open a session; its id."""
    await initialize(conn)
    return (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id


async def prompt(conn: Any, session_id: str, text: str) -> Any:
    return await conn.prompt(session_id=session_id, prompt=[{"type": "text", "text": text}])


class UsageAgent(TraceAgent):
    """Reports usage as model-backed agents do: a ``usage_update`` (context window; the session's cumulative
    cost, which the prompt sets with ``cost=<amount>``, ``currency=<code>``, ``used=<tokens>``) and token
    ``usage`` in the result (``in=<tokens>``)."""

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        words = dict(word.split("=", 1) for word in _text_of(prompt).split() if "=" in word)
        update = {
            "sessionUpdate": "usage_update",
            "used": int(words.get("used", "1000")),
            "size": 200000,
            "cost": {"amount": float(words.get("cost", "0")), "currency": words.get("currency", "USD")},
        }
        # Raw: SDK releases whose schema predates usage_update would not build it.
        await self.conn._conn.send_notification("session/update", {"sessionId": session_id, "update": update})
        await self.conn.session_update(session_id=session_id, update=_chunk("ok"))
        # A round trip to the client before answering: before 0.12 the client's SDK queues notifications behind
        # the response it resolves at once, so updates sent just before it may be handled after the turn ended.
        await self.conn.read_text_file(session_id=session_id, path="/tmp/usage.txt")
        tokens = int(words.get("in", "120"))
        return {
            "stopReason": "end_turn",
            "usage": {"inputTokens": tokens, "outputTokens": 34, "totalTokens": tokens + 34},
        }


AGENTS = {"trace": TraceAgent, "nokwargs": NoKwargsAgent, "usage": UsageAgent, "tools": ToolAgent}


def agent_main(argv: list[str]) -> None:
    """Run an agent over stdio: ``TraceAgent``, or the class ``argv[0]`` names in ``AGENTS``.

    Not instrumented unless ``ACP_OTEL_TEST_SPANS`` is set: to a file path (every span appended to it as a
    JSON line), or to ``otlp`` (a batch processor and the OTLP/HTTP exporter, both configured by OTEL_*).
    """
    agent_class = AGENTS[argv[0] if argv else "trace"]
    spans_to = os.environ.get("ACP_OTEL_TEST_SPANS")
    provider = None
    if spans_to:
        from span_file_exporter import JsonLinesExporter, make_provider

        from acp_otel import AcpInstrumentor

        if spans_to == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider = make_provider(OTLPSpanExporter(), "test-agent", batch=True)
        else:
            provider = make_provider(JsonLinesExporter(spans_to), "test-agent")
        AcpInstrumentor().instrument(tracer_provider=provider)
    import acp

    try:
        asyncio.run(acp.run_agent(agent_class()))
    finally:
        if provider is not None:
            provider.shutdown()
