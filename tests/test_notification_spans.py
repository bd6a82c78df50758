"""``notification_spans`` = all / none / events, end to end on a real client and agent (loopback TCP).
The default ``turn`` mode is in test_agent_turns.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acp_app import SECRET, TraceAgent, TraceClient, initialize, open_session, prompt
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from spans import find, one, parent_of, span_id, trace_id, wait_spans_closed, wait_until

from acp_otel._semconv import RESERVED_META_KEYS

C, S, P, N = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER


class RecordingClient(TraceClient):
    """Records, for every session/update, the extra keyword arguments and the trace id current in the handler."""

    def __init__(self) -> None:
        super().__init__()
        self.update_kwargs: list[dict[str, Any]] = []
        self.update_trace_ids: list[int] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.update_kwargs.append(dict(kwargs))
        self.update_trace_ids.append(trace.get_current_span().get_span_context().trace_id)
        await super().session_update(session_id=session_id, update=update, **kwargs)


async def _turn(pair: Any, client: Any = None, text: str = "hello") -> Any:
    p = await pair(TraceAgent(), client or RecordingClient())
    session_id = await open_session(p.client_conn)
    response = await prompt(p.client_conn, session_id, text)
    assert response.stop_reason == "end_turn"
    return p


def _turn_spans(exporter: Any) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name not in ("initialize", "session/new")]


async def test_all_is_a_span_per_notification(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(notification_spans="all")
    p = await _turn(pair)
    spans = _turn_spans(exporter)
    server_prompt = one(spans, "session/prompt", S)
    tool = one(spans, "execute_tool read", SpanKind.INTERNAL)
    producers, consumers = find(spans, "session/update", P), find(spans, "session/update", N)
    assert len(producers) == len(consumers) == 4
    # chunks under the turn; the tool call's updates under its tool span
    assert [parent_of(s) for s in producers] == [span_id(server_prompt)] * 2 + [span_id(tool)] * 2
    assert sorted(parent_of(s) for s in consumers) == sorted(span_id(s) for s in producers)
    assert [s.attributes["acp.session.update.kind"] for s in producers] == [
        "agent_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
    ]
    one(spans, "_test.dev/note", P)
    one(spans, "_test.dev/note", N)
    assert len({trace_id(s) for s in spans}) == 1
    # No session/update events anywhere in this mode.
    assert not any(e.name == "acp.session.update" for s in spans for e in s.events)
    assert p.client.update_kwargs == [{}] * 4


async def test_none_has_no_notification_spans_but_keeps_context(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(notification_spans="none")
    p = await _turn(pair)
    spans = _turn_spans(exporter)
    assert not find(spans, "session/update")
    assert not find(spans, "_test.dev/note")
    assert all(s.kind in (C, S) or s.name == "execute_tool read" for s in spans)
    client_prompt, server_prompt = one(spans, "session/prompt", C), one(spans, "session/prompt", S)
    assert parent_of(server_prompt) == span_id(client_prompt)
    # The agent's requests back to the client still link into the trace.
    tool = one(spans, "execute_tool read", SpanKind.INTERNAL)
    for method in ("session/request_permission", "fs/read_text_file", "_test.dev/echo"):
        out, inc = one(spans, method, C), one(spans, method, S)
        # the permission under the tool it names, the file read under the one tool call open
        assert parent_of(out) == span_id(server_prompt if method == "_test.dev/echo" else tool), method
        assert parent_of(inc) == span_id(out), method
    assert {trace_id(s) for s in spans} == {trace_id(client_prompt)}
    # Context still travels with the notifications: the client's handler runs in the turn's trace ...
    assert p.client.update_trace_ids == [trace_id(client_prompt)] * 4
    # ... and never sees the trace keys (neither as keyword arguments nor in an extension's _meta).
    assert p.client.update_kwargs == [{}] * 4
    assert len(p.client.ext_notes) == 1
    method, params = p.client.ext_notes[0]
    assert method == "test.dev/note"
    assert not set(RESERVED_META_KEYS) & set((params.get("_meta") or {}).keys())
    assert not any(e.name == "acp.session.update" for s in spans for e in s.events)


def _update_events(span: Any) -> list[Any]:
    return [e for e in span.events if e.name == "acp.session.update"]


async def test_events_on_the_prompt_span_of_each_side(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(notification_spans="events")
    p = await _turn(pair)
    spans = _turn_spans(exporter)
    assert not find(spans, "session/update")
    # Other notifications keep their spans.
    note_out, note_in = one(spans, "_test.dev/note", P), one(spans, "_test.dev/note", N)
    assert parent_of(note_in) == span_id(note_out)
    for kind in (C, S):
        prompt_span = one(spans, "session/prompt", kind)
        events = _update_events(prompt_span)
        assert [e.attributes["acp.session.update.kind"] for e in events] == [
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
        ], kind
        assert "acp.tool_call.id" not in events[0].attributes
        assert events[2].attributes["acp.tool_call.id"] == "call-1"
        assert events[2].attributes["acp.tool_call.status"] == "pending"
        assert events[3].attributes["acp.tool_call.id"] == "call-1"
        assert events[3].attributes["acp.tool_call.status"] == "completed"
        # No content without capture_content.
        for e in events:
            assert "acp.params" not in e.attributes
            assert all(SECRET not in str(v) for v in e.attributes.values())
        assert prompt_span.attributes["acp.session.update.count"] == 4
        assert "acp.session.update.dropped.count" not in prompt_span.attributes
    client_prompt = one(spans, "session/prompt", C)
    assert p.client.update_trace_ids == [trace_id(client_prompt)] * 4
    assert p.client.update_kwargs == [{}] * 4
    assert {trace_id(s) for s in spans} == {trace_id(client_prompt)}


async def test_events_capture_content(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(notification_spans="events", capture_content=True)
    await _turn(pair)
    spans = _turn_spans(exporter)
    for kind in (C, S):
        events = _update_events(one(spans, "session/prompt", kind))
        assert len(events) == 4
        assert SECRET in events[1].attributes["acp.params"]


async def test_events_bounded_by_max_events_per_span(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(notification_spans="events", max_events_per_span=3)
    await _turn(pair)
    spans = _turn_spans(exporter)
    for kind in (C, S):
        prompt_span = one(spans, "session/prompt", kind)
        events = _update_events(prompt_span)
        assert [e.attributes["acp.session.update.kind"] for e in events] == [
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call",
        ]
        assert prompt_span.attributes["acp.session.update.count"] == 4
        assert prompt_span.attributes["acp.session.update.dropped.count"] == 1
    assert not find(spans, "session/update")


async def test_events_without_a_prompt_in_flight_keep_their_spans(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(notification_spans="events")
    p = await pair(TraceAgent(), RecordingClient())
    session_id = await open_session(p.client_conn)
    # An update outside any prompt turn has no span to carry it: it keeps its own spans.
    await p.agent_conn.session_update(
        session_id=session_id,
        update={"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
    )
    await wait_until(lambda: find(exporter.get_finished_spans(), "session/update", N), what="the CONSUMER span")
    spans = exporter.get_finished_spans()
    one(spans, "session/update", P)
    one(spans, "session/update", N)
    assert p.client.update_kwargs == [{}]


@pytest.mark.parametrize("mode", ["events", "turn"])
async def test_turns_end_however_the_prompt_ends(
    instrument: Any, exporter: Any, pair: Any, counter: Any, mode: str
) -> None:
    from acp.exceptions import RequestError

    instrument(notification_spans=mode)
    p = await pair(TraceAgent(), RecordingClient())
    await initialize(p.client_conn)
    session_id = (await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
    assert instrument.instrumentor._state.engine is not None
    assert (await prompt(p.client_conn, session_id, "hello")).stop_reason == "end_turn"
    for text in ("fail", "rpcerror"):
        with pytest.raises(RequestError):
            await prompt(p.client_conn, session_id, text)
    # a cancelled caller: its prompt span must be unregistered too
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await wait_until(lambda: p.agent.waiting.is_set(), what="the agent is in the slow turn")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await p.client_conn.cancel(session_id=session_id)
    await wait_until(lambda: len(find(exporter.get_finished_spans(), "session/prompt", S)) == 4, what="4 turns")
    await wait_spans_closed(counter)
    assert not counter.open  # every turn (and the tool call of the first) ended
    # nothing is left registered: a later update of the session is outside any turn and keeps its spans
    await p.agent_conn.session_update(
        session_id=session_id, update={"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
    )
    await wait_until(lambda: find(exporter.get_finished_spans(), "session/update", N), what="the CONSUMER span")
