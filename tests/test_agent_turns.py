"""The agent level on a real client and agent (loopback TCP, one engine per process side): turns, tool
spans, permission under its tool, chunk counts, first-chunk time, token usage, the default streaming mode."""

from __future__ import annotations

from typing import Any

import pytest
from acp_app import SECRET, TraceAgent, TraceClient, open_session, prompt
from opentelemetry.trace import SpanKind, StatusCode
from spans import all_text, find, one, parent_of, span_id, trace_id, wait_spans_closed

C, S, P, N, INTERNAL = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER, SpanKind.INTERNAL

USAGE = {"inputTokens": 120, "outputTokens": 34, "totalTokens": 170, "thoughtTokens": 16, "cachedReadTokens": 100}


def _tool(tool_id: str, kind: str = "read", status: str = "pending", **extra: Any) -> dict[str, Any]:
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": tool_id,
        "title": f"T {SECRET}",
        "kind": kind,
        "status": status,
        **extra,
    }


def _tool_update(tool_id: str, status: str | None = None, **extra: Any) -> dict[str, Any]:
    update = {"sessionUpdate": "tool_call_update", "toolCallId": tool_id, **extra}
    if status is not None:
        update["status"] = status
    return update


class ScriptAgent(TraceAgent):
    """Sends the updates of ``script`` (a list of update dicts or ``("permission", tool_id)``) and returns usage."""

    def __init__(self, script: list[Any], usage: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.script = script
        self.usage = usage

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        for step in self.script:
            if isinstance(step, tuple):
                await self.conn.request_permission(
                    session_id=session_id,
                    tool_call={"toolCallId": step[1], "title": "x", "status": "pending"},
                    options=[{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
                )
            else:  # raw, so that values the SDK's models would reject reach the wire as a hostile agent sends them
                await self.conn._conn.send_notification("session/update", {"sessionId": session_id, "update": step})
        result: dict[str, Any] = {"stopReason": "end_turn"}
        if self.usage is not None:
            result["usage"] = self.usage
        return result


async def _run(pair: Any, agent: Any, counter: Any) -> Any:
    p = await pair(agent, TraceClient())
    session_id = await open_session(p.client_conn)
    response = await prompt(p.client_conn, session_id, "hello")
    await wait_spans_closed(counter)
    assert not counter.open, counter.open  # nothing left open: turns and tools all ended
    return response


async def test_turn_attributes_counts_usage_and_first_chunk(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": SECRET}}
    thought = {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}
    plan = {"sessionUpdate": "plan", "entries": [{"content": SECRET, "priority": "high", "status": "pending"}]}
    await _run(pair, ScriptAgent([thought, chunk, chunk, chunk, plan], usage=USAGE), counter)
    spans = exporter.get_finished_spans()
    assert not find(spans, "session/update")  # default mode: no span per update inside the turn
    for turn in (one(spans, "session/prompt", C), one(spans, "session/prompt", S)):
        a = turn.attributes
        assert a["gen_ai.operation.name"] == "invoke_agent"
        assert (a["gen_ai.agent.name"], a["gen_ai.agent.version"]) == ("test-agent", "2.0.0")
        assert a["gen_ai.conversation.id"] == "sess-1"
        assert a["acp.turn.agent_message_chunk.count"] == 3
        assert a["acp.turn.agent_thought_chunk.count"] == 1
        assert "acp.turn.user_message_chunk.count" not in a
        assert a["acp.session.update.count"] == 5
        ttfc = a["acp.turn.time_to_first_chunk"]
        assert 0 <= ttfc <= (turn.end_time - turn.start_time) / 1e9
        # the plan is an event, kind only
        events = [e for e in turn.events if e.name == "acp.session.update"]
        assert [e.attributes["acp.session.update.kind"] for e in events] == ["plan"]
    # usage once per turn: on the traced agent's span only (the editor saw its updates arrive traced)
    a = one(spans, "session/prompt", S).attributes
    assert a["gen_ai.usage.input_tokens"] == 120 and a["gen_ai.usage.output_tokens"] == 34
    assert a["gen_ai.usage.reasoning.output_tokens"] == 16
    assert a["gen_ai.usage.cache_read.input_tokens"] == 100 and a["acp.usage.total_tokens"] == 170
    assert "gen_ai.usage.cache_write.input_tokens" not in a
    assert not [k for k in one(spans, "session/prompt", C).attributes if k.startswith(("gen_ai.usage", "acp.usage"))]
    assert SECRET not in all_text(spans)


async def test_tool_span_permission_and_client_handling(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    script = [
        _tool("t1", kind="edit", name="write_file"),
        ("permission", "t1"),
        _tool_update("t1", "in_progress"),
        _tool_update("t1", content=[{"type": "content", "content": {"type": "text", "text": SECRET}}]),
        _tool_update("t1", "completed", rawOutput={"out": SECRET}),
    ]
    await _run(pair, ScriptAgent(script), counter)
    spans = exporter.get_finished_spans()
    server_prompt = one(spans, "session/prompt", S)
    tool = one(spans, "execute_tool write_file", INTERNAL)  # exactly one tool span, on the agent's side
    assert len([s for s in spans if s.name.startswith("execute_tool")]) == 1
    assert parent_of(tool) == span_id(server_prompt)
    a = tool.attributes
    assert a["gen_ai.operation.name"] == "execute_tool"
    assert a["gen_ai.tool.call.id"] == "t1" and a["gen_ai.tool.name"] == "write_file"
    assert a["acp.tool_call.kind"] == "edit" and a["acp.tool_call.status"] == "completed"
    assert a["gen_ai.conversation.id"] == "sess-1" and a["acp.tool_call.update.count"] == 3
    assert a["gen_ai.agent.name"] == "test-agent"
    assert "acp.tool_call.ended_by" not in a and tool.status.status_code == StatusCode.UNSET
    assert [e.attributes["acp.tool_call.status"] for e in tool.events] == ["pending", "in_progress", "completed"]
    # turn -> tool -> permission request -> the client's handling of it
    out, inc = one(spans, "session/request_permission", C), one(spans, "session/request_permission", S)
    assert parent_of(out) == span_id(tool) and parent_of(inc) == span_id(out)
    assert tool.start_time <= out.start_time and out.end_time <= tool.end_time
    assert len({trace_id(s) for s in spans if s.name not in ("initialize", "session/new")}) == 1
    assert SECRET not in all_text(spans)


async def test_tool_status_events_are_capped(instrument: Any, exporter: Any, pair: Any, counter: Any) -> None:
    """``max_events_per_span`` caps a tool span's status events (the first ones are kept); its status attribute
    still follows every update."""
    instrument(max_events_per_span=2)
    script = [
        _tool("t1"),
        _tool_update("t1", "in_progress"),
        _tool_update("t1", "in_progress"),
        _tool_update("t1", "completed"),
    ]
    await _run(pair, ScriptAgent(script), counter)
    (tool,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [e.attributes["acp.tool_call.status"] for e in tool.events] == ["pending", "in_progress"]
    assert tool.attributes["acp.tool_call.status"] == "completed"


async def test_failed_never_completed_concurrent_and_hostile_tools(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    script = [
        _tool("a", kind="execute"),
        _tool("b", kind="fetch"),  # concurrent with a
        _tool_update("c", "in_progress", kind="search"),  # an update before any tool_call: opens the span
        _tool_update("a", "in_progress"),
        _tool_update("b", "failed"),
        _tool("a", kind="execute", status="in_progress"),  # repeated tool_call: the same span
        _tool_update("b", "completed"),  # after failed: ignored, no second span
        _tool_update("a", "completed"),
        {"sessionUpdate": "tool_call", "toolCallId": {"x": 1}, "kind": ["bad"], "status": 7},  # hostile
        {"sessionUpdate": "tool_call_update", "toolCallId": "d", "status": {"bad": True}, "name": 5},
        _tool("e", kind="delete", name="x" * 1000),
        {"sessionUpdate": {"not": "hashable"}, "toolCallId": "f"},  # hostile kind: counted, nothing else
    ]  # c, d and e never complete
    response = await _run(pair, ScriptAgent(script), counter)
    assert response.stop_reason == "end_turn"
    spans = exporter.get_finished_spans()
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("execute_tool")}
    assert sorted(tools) == ["a", "b", "c", "d", "e"]
    assert tools["a"].name == "execute_tool execute" and tools["a"].status.status_code == StatusCode.UNSET
    assert [e.attributes["acp.tool_call.status"] for e in tools["a"].events] == ["pending", "in_progress", "completed"]
    b = tools["b"]
    assert b.status.status_code == StatusCode.ERROR and b.attributes["error.type"] == "tool_error"
    assert b.attributes["acp.tool_call.status"] == "failed"
    for never in ("c", "d", "e"):
        assert tools[never].attributes["acp.tool_call.ended_by"] == "turn_end"
        assert tools[never].status.status_code == StatusCode.UNSET
    assert tools["c"].attributes["acp.tool_call.status"] == "in_progress"
    assert tools["d"].name == "execute_tool" and "acp.tool_call.status" not in tools["d"].attributes
    assert len(tools["e"].name) <= len("execute_tool ") + 128
    turn = one(spans, "session/prompt", S)
    assert all(parent_of(t) == span_id(turn) for t in tools.values())
    assert all(t.end_time <= turn.end_time for t in tools.values())


async def test_interleaved_sessions_keep_their_own_tools(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    import asyncio

    class TwoSessions(TraceAgent):
        async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
            tool_id = f"tool-{session_id}"
            await self.conn.session_update(session_id=session_id, update=_tool(tool_id))
            await asyncio.sleep(0.02)  # the other session's turn runs meanwhile
            await self.conn.session_update(session_id=session_id, update=_tool_update(tool_id, "completed"))
            return {"stopReason": "end_turn"}

    p = await pair(TwoSessions(), TraceClient())
    first = await open_session(p.client_conn)
    second = (await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
    await asyncio.gather(prompt(p.client_conn, first, "a"), prompt(p.client_conn, second, "b"))
    await wait_spans_closed(counter)
    spans = exporter.get_finished_spans()
    turns = {
        s.attributes["gen_ai.conversation.id"]: s
        for s in spans
        if s.kind == S and s.attributes.get("gen_ai.operation.name") == "invoke_agent"
    }
    assert sorted(turns) == sorted([first, second])
    for session_id, turn in turns.items():
        tool = one(
            [s for s in spans if s.attributes.get("gen_ai.tool.call.id") == f"tool-{session_id}"], "execute_tool read"
        )
        assert parent_of(tool) == span_id(turn) and tool.attributes["gen_ai.conversation.id"] == session_id
        assert "acp.tool_call.ended_by" not in tool.attributes


@pytest.mark.parametrize("mode", ["never", "always"])
async def test_tool_spans_option(instrument: Any, exporter: Any, pair: Any, counter: Any, mode: str) -> None:
    instrument(tool_spans=mode)
    await _run(pair, ScriptAgent([_tool("t"), _tool_update("t", "completed")]), counter)
    spans = exporter.get_finished_spans()
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    # always: the agent and the client (which got the updates with context) both make one
    assert len(tools) == (0 if mode == "never" else 2)
    if mode == "never":  # the facts stay on the turn as events
        turn = one(spans, "session/prompt", S)
        kinds = [e.attributes["acp.session.update.kind"] for e in turn.events]
        assert kinds == ["tool_call", "tool_call_update"]


async def test_all_mode_keeps_update_spans_and_tool_spans(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    instrument(notification_spans="all")
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
    await _run(pair, ScriptAgent([chunk, _tool("t"), _tool_update("t", "completed")]), counter)
    spans = exporter.get_finished_spans()
    tool = one(spans, "execute_tool read", INTERNAL)
    producers = find(spans, "session/update", P)
    assert len(producers) == len(find(spans, "session/update", N)) == 3
    tool_producers = [s for s in producers if "acp.tool_call.id" in s.attributes]
    assert all(parent_of(s) == span_id(tool) for s in tool_producers) and len(tool_producers) == 2
    assert one(spans, "session/prompt", S).attributes["acp.turn.agent_message_chunk.count"] == 1


async def test_tool_spans_on_both_sides_a_received_update_stays_under_its_senders_span(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    """``tool_spans=always``: the client makes a tool span of its own too, but an update that arrived with the
    agent's context stays that context's child (the client's tool span is not its parent)."""
    instrument(tool_spans="always", notification_spans="all")
    await _run(pair, ScriptAgent([_tool("t"), _tool_update("t", "completed")]), counter)
    spans = exporter.get_finished_spans()
    producers = {s.attributes["acp.tool_call.status"]: s for s in find(spans, "session/update", P)}
    consumers = {s.attributes["acp.tool_call.status"]: s for s in find(spans, "session/update", N)}
    assert set(producers) == set(consumers) == {"pending", "completed"}
    for status, consumer in consumers.items():
        assert parent_of(consumer) == span_id(producers[status]), status


async def test_updates_outside_a_turn_keep_their_spans(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    await p.agent_conn.session_update(session_id=session_id, update=_tool("late"))  # no prompt in flight
    from spans import wait_until

    await wait_until(lambda: find(exporter.get_finished_spans(), "session/update", N), what="consumer span")
    spans = exporter.get_finished_spans()
    one(spans, "session/update", P)
    assert not [s for s in spans if s.name.startswith("execute_tool")]


async def test_uninstrument_leaves_nothing_on_live_connections(instrument: Any, pair: Any, counter: Any) -> None:
    p = await pair(ScriptAgent([_tool("open-at-uninstrument")]), TraceClient())
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "hello")
    engine = instrument.instrumentor._state.engine
    assert engine is not None and len(engine._peers) == 2
    instrument.off()
    assert len(engine._peers) == 0  # the per-connection state lived in the engine only
    for conn in (p.client_conn._conn, p.agent_conn._conn):
        assert not [k for k in vars(conn) if "acp_otel" in k]
    await prompt(p.client_conn, session_id, "hello")  # the live connections keep working, untraced
    assert not counter.open
