"""ACP v2 turns (``acp.experimental.v2``, SDK 1.0.0rc3) with the real v2 classes over loopback TCP.

On v2 ``session/prompt`` answers when the prompt is accepted; the turn lasts until the ``state_update``
whose state is ``idle``. The turn is an INTERNAL span ``invoke_agent {agent}``: the parent of the
client's request span, beside the agent's SERVER span; tool calls, permission requests and chunk counts
hang from it.

    .venv/bin/nox -s "matrix(python='3.12', sdk='1.0.0rc3')" -- tests/test_agent_v2.py
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from spans import all_text, find, one, parent_of, span_id, trace_id, wait_spans_closed, wait_until

v2 = pytest.importorskip("acp.experimental.v2", reason="ACP v2 (acp.experimental.v2) is in SDK 1.0.0rc3 and later")

SECRET = "V2-SECRET-CONTENT"
USAGE = {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18}


def _chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "messageId": "a-1", "content": {"type": "text", "text": text}}


class V2Agent:
    """Accepts a prompt at once, then works in the background: streams, runs a tool, asks, goes idle."""

    def __init__(self, go_idle: bool = True) -> None:
        self.conn: Any = None
        self.go_idle = go_idle
        self.work: list[asyncio.Task[Any]] = []

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, info: Any, capabilities: Any = None, **kw: Any) -> Any:
        return {"protocolVersion": 2, "info": {"name": "v2-agent", "version": "0.2.0"}, "capabilities": {"session": {}}}

    async def new_session(self, cwd: str, **kw: Any) -> Any:
        return {"sessionId": "v2-sess"}

    async def prompt(self, session_id: str, prompt: Any, **kw: Any) -> Any:
        self.work.append(asyncio.create_task(self._turn(session_id)))
        return {"messageId": "m-1"}

    async def _send(self, session_id: str, update: dict[str, Any]) -> None:
        await self.conn._conn.send_notification("session/update", {"sessionId": session_id, "update": update})

    async def _turn(self, session_id: str) -> None:
        await self._send(session_id, {"sessionUpdate": "state_update", "state": "running"})
        await asyncio.sleep(0.01)
        await self._send(session_id, _chunk(SECRET))
        tool = {"sessionUpdate": "tool_call_update", "toolCallId": "v2-tool", "name": "grep", "kind": "search"}
        await self._send(session_id, {**tool, "status": "pending", "title": SECRET})
        await self.conn._conn.send_request(
            "session/request_permission",
            {
                "sessionId": session_id,
                "title": "May I?",
                "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
                "subject": {"type": "tool_call", "toolCall": {"toolCallId": "v2-tool"}},
            },
        )
        await self._send(session_id, {**tool, "status": "in_progress"})
        await self._send(session_id, {**tool, "status": "completed"})
        await self._send(session_id, _chunk("done"))
        if self.go_idle:
            idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn", "usage": USAGE}
            await self._send(session_id, idle)


class V2Client:
    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, title: str, options: Any, **kw: Any) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": "allow"}}


@contextlib.asynccontextmanager
async def _v2_pair(agent: V2Agent, client: V2Client) -> Any:
    ready = asyncio.Event()
    holder: dict[str, Any] = {}

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        holder["agent"] = v2.AgentSideConnection(agent, writer, reader)
        holder["agent_writer"] = writer
        ready.set()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    client_conn = v2.ClientSideConnection(client, writer, reader)
    await asyncio.wait_for(ready.wait(), 5)
    try:
        yield client_conn, holder["agent"]
    finally:
        for task in agent.work:
            task.cancel()
        for conn in (client_conn, holder["agent"]):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)
        for w in (writer, holder["agent_writer"]):
            w.close()
        server.close()


async def _start_turn(client_conn: Any) -> str:
    await client_conn.initialize(protocol_version=2, info={"name": "v2-client", "version": "1.0"})
    session = await client_conn.new_session(cwd="/tmp")
    accepted = await client_conn.prompt(session_id=session.session_id, prompt=[{"type": "text", "text": SECRET}])
    assert accepted.message_id == "m-1"
    return str(session.session_id)


async def test_v2_turn_lasts_until_idle(instrument: Any, exporter: Any, counter: Any) -> None:
    agent, client = V2Agent(), V2Client()
    async with _v2_pair(agent, client) as (client_conn, _agent_conn):
        await _start_turn(client_conn)
        await wait_until(lambda: len(find(exporter.get_finished_spans(), "invoke_agent v2-agent")) == 2, what="turns")
        await wait_spans_closed(counter)
        assert not counter.open
    spans = exporter.get_finished_spans()
    request_c, request_s = one(spans, "session/prompt", SpanKind.CLIENT), one(spans, "session/prompt", SpanKind.SERVER)
    turns = find(spans, "invoke_agent v2-agent", SpanKind.INTERNAL)
    # the sender's turn wraps its request; the agent's turn is beside its SERVER span, under the same parent
    turn_c = next(t for t in turns if span_id(t) == parent_of(request_c))
    turn_s = next(t for t in turns if parent_of(t) == parent_of(request_s) == span_id(request_c))
    for request, turn in ((request_c, turn_c), (request_s, turn_s)):
        assert "gen_ai.operation.name" not in request.attributes  # the request stands for the acceptance only
        assert request.end_time < turn.end_time  # the turn outlives the answer
        a = turn.attributes
        assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "v2-agent"
        assert a["gen_ai.agent.version"] == "0.2.0" and a["gen_ai.conversation.id"] == "v2-sess"
        assert a["acp.stop_reason"] == "end_turn"
        if turn is turn_s:  # usage once: on the traced agent's turn
            assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (11, 7)
            assert a["acp.usage.total_tokens"] == 18
        else:
            assert not [k for k in a if k.startswith(("gen_ai.usage.", "acp.usage."))]
        assert a["acp.turn.agent_message_chunk.count"] == 2
        assert 0 <= a["acp.turn.time_to_first_chunk"] <= (turn.end_time - turn.start_time) / 1e9
        assert "acp.turn.ended_by" not in a
        states = [e.attributes["acp.turn.state"] for e in turn.events if "acp.turn.state" in e.attributes]
        assert states == ["running", "idle"]
    # one tool span (the agent's), under the agent's turn; the permission request under the tool
    tool = one(spans, "execute_tool grep", SpanKind.INTERNAL)
    assert parent_of(tool) == span_id(turn_s)
    assert tool.attributes["acp.tool_call.status"] == "completed" and tool.status.status_code == StatusCode.UNSET
    assert [e.attributes["acp.tool_call.status"] for e in tool.events] == ["pending", "in_progress", "completed"]
    out = one(spans, "session/request_permission", SpanKind.CLIENT)
    inc = one(spans, "session/request_permission", SpanKind.SERVER)
    assert parent_of(out) == span_id(tool) and parent_of(inc) == span_id(out)
    others = [(s.name, s.kind) for s in spans if trace_id(s) != trace_id(request_c)]
    assert {n for n, _ in others} <= {"initialize", "session/new"}, others
    assert not find(spans, "session/update")
    assert SECRET not in all_text(spans)


async def test_v2_turn_without_idle_ends_with_the_connection(instrument: Any, exporter: Any, counter: Any) -> None:
    agent = V2Agent(go_idle=False)
    async with _v2_pair(agent, V2Client()) as (client_conn, _agent_conn):
        await _start_turn(client_conn)
        await asyncio.gather(*agent.work)
        await asyncio.sleep(0.05)
        assert not find(exporter.get_finished_spans(), "invoke_agent v2-agent")  # still in flight: no idle yet
    await wait_spans_closed(counter)
    assert not counter.open  # closing the connections ended both turns
    turns = find(exporter.get_finished_spans(), "invoke_agent v2-agent")
    assert len(turns) == 2
    assert {t.attributes["acp.turn.ended_by"] for t in turns} == {"connection_closed"}
    assert all(t.status.status_code == StatusCode.UNSET for t in turns)


async def test_v2_turn_captures_its_content(instrument: Any, exporter: Any, counter: Any) -> None:
    """With capture on, each side's v2 turn span carries the prompt and the agent's streamed text."""
    instrument(capture_content=True)
    async with _v2_pair(V2Agent(), V2Client()) as (client_conn, _agent_conn):
        await _start_turn(client_conn)
        await wait_until(lambda: len(find(exporter.get_finished_spans(), "invoke_agent v2-agent")) == 2, what="turns")
        await wait_spans_closed(counter)
    turns = find(exporter.get_finished_spans(), "invoke_agent v2-agent", SpanKind.INTERNAL)
    assert len(turns) == 2
    for turn in turns:
        a = turn.attributes
        assert a["input.value"] == SECRET and a["output.value"] == SECRET + "done"
        assert SECRET in a["gen_ai.input.messages"] and SECRET in a["gen_ai.output.messages"]
        assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)  # from the idle state's end_turn
