"""The engine's agent layer fed plain message dicts, as the stdio proxy feeds it (no SDK): ``parent=``,
``sender_traced=``, ``close_peer``, ``shutdown``, ``propagation_keys``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from spans import SpanCounter, one, parent_of, span_id

from acp_otel import _semconv as sc
from acp_otel._engine import Engine
from acp_otel._settings import load_settings


class Peer:
    """One proxied connection (any weak-referenceable object)."""


@pytest.fixture
def spans() -> Iterator[tuple[InMemorySpanExporter, SpanCounter, TracerProvider]]:
    exporter, counter = InMemorySpanExporter(), SpanCounter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(counter)
    yield exporter, counter, provider
    provider.shutdown()


def _engine(provider: TracerProvider, **options: Any) -> Engine:
    return Engine(provider.get_tracer("test"), load_settings(options, {}))


def _update(update: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": "s", "update": update}


TOOL = {"sessionUpdate": "tool_call", "toolCallId": "t", "kind": "read", "status": "pending"}
DONE = {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"}


def test_relayed_updates_make_tool_spans_only_from_an_untraced_agent(spans: Any) -> None:
    exporter, counter, provider = spans
    engine = _engine(provider)
    peer = Peer()
    prompt, _ = engine.begin_outgoing(peer, "session/prompt", {"sessionId": "s", "prompt": []}, 1, parent=Context())
    assert prompt is not None and prompt.turn is not None
    for traced, tool_id in ((True, "traced"), (False, "untraced")):
        for update in (TOOL, DONE):
            call, params = engine.begin_outgoing(
                peer,
                "session/update",
                _update({**update, "toolCallId": tool_id}),
                is_request=False,
                parent=Context(),
                sender_traced=traced,
            )
            assert call is None  # turn mode: no span of its own
            assert "traceparent" in params["_meta"]  # but the context is still injected
    engine.end_result(prompt, {"stopReason": "end_turn"})
    finished = exporter.get_finished_spans()
    turn = one(finished, "session/prompt", SpanKind.CLIENT)
    tool = one(finished, "execute_tool read", SpanKind.INTERNAL)  # only the untraced agent's tool call
    assert tool.attributes["gen_ai.tool.call.id"] == "untraced" and parent_of(tool) == span_id(turn)
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert not counter.open


def test_untraced_message_in_a_turn_joins_it_and_a_traced_parent_wins(spans: Any) -> None:
    exporter, _counter, provider = spans
    engine = _engine(provider)
    peer = Peer()
    prompt, _ = engine.begin_outgoing(peer, "session/prompt", {"sessionId": "s"}, 1, parent=Context())
    engine.begin_outgoing(
        peer, "session/update", _update(TOOL), is_request=False, parent=Context(), sender_traced=False
    )
    permission_params = {"sessionId": "s", "toolCall": {"toolCallId": "t"}, "options": []}
    permission, _ = engine.begin_outgoing(peer, "session/request_permission", permission_params, 7, parent=Context())
    read, _ = engine.begin_outgoing(peer, "fs/read_text_file", {"sessionId": "s", "path": "/x"}, 8, parent=Context())
    other = trace.get_tracer("x", tracer_provider=provider).start_span("elsewhere")
    explicit, _ = engine.begin_outgoing(
        peer, "fs/read_text_file", {"sessionId": "s"}, 9, parent=trace.set_span_in_context(other)
    )
    for call in (permission, read, explicit):
        engine.end_result(call, {})
    other.end()
    engine.end_result(prompt, {"stopReason": "end_turn"})
    finished = exporter.get_finished_spans()
    turn, tool = one(finished, "session/prompt"), one(finished, "execute_tool read")
    assert parent_of(one(finished, "session/request_permission")) == span_id(tool)
    reads = {s.attributes["jsonrpc.request.id"]: s for s in finished if s.name == "fs/read_text_file"}
    assert parent_of(reads["8"]) == span_id(tool)  # the one tool call open: the request serves it
    assert parent_of(tool) == span_id(turn)
    assert parent_of(reads["9"]) == span_id(other)  # a sender's own context is kept


def test_the_prompt_span_ends_when_recording_its_turn_fails(spans: Any) -> None:
    """A meter that raises (a broken custom provider) while the turn's metrics are recorded: the v1 turn's
    request span still ends, and the error stays inside the engine."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from acp_otel._metrics import make_instruments

    exporter, counter, provider = spans
    instruments = make_instruments(MeterProvider(metric_readers=[InMemoryMetricReader()]), "0")
    assert instruments is not None

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("meter failed")

    instruments.turn_duration.record = broken  # type: ignore[method-assign]
    engine = Engine(provider.get_tracer("test"), load_settings({}, {}), instruments)
    prompt, _ = engine.begin_outgoing(Peer(), "session/prompt", {"sessionId": "s", "prompt": []}, 1, parent=Context())
    engine.end_result(prompt, {"stopReason": "end_turn"})  # does not raise
    assert not counter.open
    turn = one(exporter.get_finished_spans(), "session/prompt", SpanKind.CLIENT)
    assert turn.attributes["acp.stop_reason"] == "end_turn"


def test_close_peer_ends_turns_and_tools_and_is_safe_twice(spans: Any) -> None:
    exporter, counter, provider = spans
    engine = _engine(provider)
    peer = Peer()
    prompt, _ = engine.begin_outgoing(peer, "session/prompt", {"sessionId": "s"}, 1, parent=Context())
    engine.begin_outgoing(peer, "session/update", _update(TOOL), is_request=False, sender_traced=False)
    engine.close_peer(peer)
    engine.close_peer(peer)
    engine.close_peer(Peer())  # never seen: nothing to do
    engine.end_exception(prompt, ConnectionError("late"))  # already ended: a no-op
    assert not counter.open
    finished = exporter.get_finished_spans()
    turn, tool = one(finished, "session/prompt"), one(finished, "execute_tool read")
    assert tool.attributes["acp.tool_call.ended_by"] == "connection_closed"
    assert tool.status.status_code == StatusCode.UNSET
    assert turn.attributes["acp.turn.ended_by"] == "connection_closed"
    assert turn.attributes["error.type"] == "ConnectionError"


def test_shutdown_ends_everything_left_open(spans: Any) -> None:
    exporter, counter, provider = spans
    engine = _engine(provider)
    peers = [Peer(), Peer()]
    prompts = []
    for peer in peers:
        prompts.append(engine.begin_outgoing(peer, "session/prompt", {"sessionId": "s"}, 1, parent=Context())[0])
        engine.begin_outgoing(peer, "session/update", _update(TOOL), is_request=False, sender_traced=False)
    engine.shutdown()
    # the tool calls ended; the requests in flight keep their spans until they end (the adapter ends them)
    assert sorted(counter.open.values()) == [("session/prompt", "CLIENT")] * 2
    for call in prompts:
        engine.end_result(call, {"stopReason": "end_turn"})
    assert not counter.open
    tools = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [t.attributes["acp.tool_call.ended_by"] for t in tools] == ["uninstrumented"] * 2


def test_propagation_keys_and_tool_spans_option(spans: Any) -> None:
    exporter, _counter, provider = spans
    engine = _engine(provider, tool_spans="never")
    assert {"traceparent", "tracestate", "baggage"} <= set(engine.propagation_keys)
    peer = Peer()
    prompt, _ = engine.begin_outgoing(peer, "session/prompt", {"sessionId": "s"}, 1, parent=Context())
    engine.begin_outgoing(peer, "session/update", _update(TOOL), is_request=False, sender_traced=False)
    engine.end_result(prompt, {"stopReason": "end_turn"})
    assert not [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]


def _v2_turn(engine: Engine, peer: Peer) -> None:
    """A v2 connection (learned from initialize), a prompt accepted, a chunk streamed."""
    init, _ = engine.begin_outgoing(peer, "initialize", {"protocolVersion": 2}, 0, parent=Context())
    engine.end_result(init, {"protocolVersion": 2, "agentCapabilities": {}, "agentInfo": {"name": "a"}})
    params = {"sessionId": "s", "prompt": [{"type": "text", "text": "q"}]}
    accepted, _ = engine.begin_outgoing(peer, "session/prompt", params, 1, parent=Context())
    engine.end_result(accepted, {})
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "partial"}}
    engine.begin_outgoing(peer, "session/update", _update(chunk), is_request=False, sender_traced=False)


@pytest.mark.parametrize("closed", [True, False], ids=["connection-closed", "idle"])
def test_a_v2_turn_cut_off_by_the_connection_finishes_with_an_error(spans: Any, closed: bool) -> None:
    exporter, counter, provider = spans
    engine = _engine(provider, capture_content=True)
    peer = Peer()
    _v2_turn(engine, peer)
    if closed:
        engine.close_peer(peer)
    else:
        idle = {"sessionUpdate": sc.V2_STATE_UPDATE, "state": "idle", "stopReason": "end_turn"}
        engine.begin_outgoing(peer, "session/update", _update(idle), is_request=False, sender_traced=False)
    assert not counter.open
    turn = one(exporter.get_finished_spans(), f"{sc.ACP_TURN_SPAN_NAME} a", SpanKind.INTERNAL)
    (message,) = json.loads(turn.attributes[sc.GEN_AI_OUTPUT_MESSAGES])
    assert message["parts"] == [{"type": "text", "content": "partial"}]
    if closed:  # no stop reason came: none is claimed, and the turn says what ended it
        assert sc.GEN_AI_RESPONSE_FINISH_REASONS not in turn.attributes
        assert turn.attributes[sc.ACP_TURN_ENDED_BY] == "connection_closed"
    else:
        assert turn.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] == (sc.FINISH_REASONS["end_turn"],)
    assert (turn.attributes.get(sc.ACP_TURN_ENDED_BY) is not None) is closed


def test_each_kind_of_prompt_part_in_the_input_messages(spans: Any) -> None:
    """Capture on: every ACP content block of a prompt becomes the GenAI part of its kind and modality."""
    exporter, _counter, provider = spans
    engine = _engine(provider, capture_content=True)
    blocks = [
        {"type": "text", "text": "look"},
        {"type": "image", "data": "aW1n", "mimeType": "image/png"},
        {"type": "audio", "data": "YXVk", "mimeType": "audio/wav"},
        {"type": "resource_link", "uri": "file:///a.mp4", "name": "a", "mimeType": "video/mp4"},
        {"type": "resource", "resource": {"uri": "file:///n.txt", "text": "notes"}},
        {"type": "resource", "resource": {"uri": "file:///b.pdf", "blob": "cGRm", "mimeType": "application/pdf"}},
    ]
    prompt, _ = engine.begin_outgoing(
        Peer(), "session/prompt", {"sessionId": "s", "prompt": blocks}, 1, parent=Context()
    )
    engine.end_result(prompt, {"stopReason": "end_turn"})
    turn = one(exporter.get_finished_spans(), "session/prompt", SpanKind.CLIENT)
    (message,) = json.loads(turn.attributes[sc.GEN_AI_INPUT_MESSAGES])
    assert message["role"] == "user"
    assert message["parts"] == [
        {"type": "text", "content": "look"},
        {"type": "blob", "modality": "image", "content": "aW1n", "mime_type": "image/png"},
        {"type": "blob", "modality": "audio", "content": "YXVk", "mime_type": "audio/wav"},
        {"type": "uri", "modality": "video", "uri": "file:///a.mp4", "mime_type": "video/mp4"},
        {"type": "text", "content": "notes"},
        {"type": "blob", "modality": "document", "content": "cGRm", "mime_type": "application/pdf"},
    ]
    assert turn.attributes[sc.INPUT_VALUE] == "look\nnotes"


@pytest.mark.parametrize("reported", [True, False])
def test_requests_serving_a_tool_call_the_agent_reports_itself_carry_its_id(spans: Any, reported: bool) -> None:
    """The agent's own telemetry reports its tool calls (the proxy's --agent-telemetry): no tool spans here, and the
    permission, fs/* and terminal/* spans name the tool call they serve (the proxy moves them under the agent's
    span of it); the same rule as with tool spans. Not reported: tool spans, and no such mark."""
    exporter, _, provider = spans
    engine = _engine(provider)
    peer = Peer()
    engine.peer_state(peer)
    if reported:
        engine.note_agent_reports(peer, tools=True)

    def relay(method: str, params: dict[str, Any], request_id: Any = None) -> None:
        call, _ = engine.begin_outgoing(
            peer, method, {"sessionId": "s", **params}, request_id, request_id is not None, parent=Context()
        )
        if call is not None:
            engine.end_result(call, {})

    prompt, _ = engine.begin_outgoing(peer, "session/prompt", {"sessionId": "s", "prompt": []}, 1, parent=Context())
    terminal = {"type": "terminal", "terminalId": "term-1"}
    relay("session/update", {"update": {**TOOL, "toolCallId": "t1", "content": [terminal]}})
    relay("session/update", {"update": {**TOOL, "toolCallId": "t2"}})
    relay("terminal/output", {"terminalId": "term-1"}, "a")  # its terminal's tool call
    relay("fs/read_text_file", {"path": "/x"}, "b")  # two open: none
    relay("session/request_permission", {"toolCall": {"toolCallId": "t3"}, "options": []}, "c")  # the one it names
    relay("session/update", {"update": {**DONE, "toolCallId": "t1"}})
    relay("session/update", {"update": {**DONE, "toolCallId": "t3"}})
    relay("fs/write_text_file", {"path": "/x", "content": ""}, "d")  # one open: that one
    relay("terminal/output", {"terminalId": "term-1"}, "e")  # its tool call has ended: none
    engine.end_result(prompt, {"stopReason": "end_turn"})
    finished = exporter.get_finished_spans()
    (turn,) = [s for s in finished if s.name.startswith("session/prompt")]
    marks = {
        s.attributes[sc.JSONRPC_REQUEST_ID]: s.attributes.get(sc.ACP_TOOL_CALL_ID)
        for s in finished
        if sc.JSONRPC_REQUEST_ID in s.attributes and s is not turn
    }
    tools = [s for s in finished if s.attributes.get(sc.GEN_AI_OPERATION_NAME) == sc.EXECUTE_TOOL]
    if reported:
        assert marks == {"a": "t1", "b": None, "c": "t3", "d": "t2", "e": None}
        assert tools == []
        requests = [s for s in finished if sc.JSONRPC_REQUEST_ID in s.attributes and s is not turn]
        assert all(parent_of(s) == span_id(turn) for s in requests)  # under the turn here: the proxy moves them
    else:
        assert set(marks.values()) == {None}
        assert len(tools) == 3
