"""Turn facts pinned to what they claim, on a real client and agent: the time to the FIRST agent chunk (not a
user chunk, not the last chunk), the usage range, and the bounds on stop reasons and request error types in
metric attributes (hostile peers must not grow the metrics' cardinality)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp_app import TraceAgent, TraceClient, open_session, prompt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import SpanKind
from spans import wait_spans_closed

PAUSE = 0.3  # between the chunks: a lower bound only (a sleep lasts at least this long), never an upper one


def _text(kind: str, text: str = "x") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        point
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def _turns(exporter: Any) -> dict[Any, Any]:
    """The turn spans by kind (CLIENT: the editor's, SERVER: the agent's): one of each."""
    turns = [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    by_kind = {s.kind: s for s in turns}
    assert len(turns) == 2 and set(by_kind) == {SpanKind.CLIENT, SpanKind.SERVER}, turns
    return by_kind


class ChunkAgent(TraceAgent):
    """Sends ``script`` (update dicts, or ``"pause"``) raw, noting the monotonic clock around each send."""

    def __init__(self, script: list[Any], result: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.script = script
        self.result = result or {"stopReason": "end_turn"}
        self.entered = 0.0
        self.sent: list[tuple[float, float]] = []  # (before, after) each update's send

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self.entered = time.monotonic()
        for step in self.script:
            if step == "pause":
                await asyncio.sleep(PAUSE)
                continue
            before = time.monotonic()
            await self.conn._conn.send_notification("session/update", {"sessionId": session_id, "update": step})
            self.sent.append((before, time.monotonic()))
        return self.result


class ClockClient(TraceClient):
    """Notes the monotonic clock when each update reaches the application (after the tracing saw it)."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[float] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.received.append(time.monotonic())
        await super().session_update(session_id, update, **kwargs)


async def _run(pair: Any, counter: Any, agent: Any, client: Any = None, hostile: bool = False) -> float:
    p = await pair(agent, client or TraceClient())
    session_id = await open_session(p.client_conn)
    before = time.monotonic()
    try:
        await prompt(p.client_conn, session_id, "hello")
    except Exception:  # some SDK releases (0.8) validate the answer on the client's side and reject it
        if not hostile:
            raise
    await wait_spans_closed(counter)
    return before


async def test_first_chunk_time_is_the_first_agent_chunk(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    # A user chunk first (a replayed prompt), then the agent's first chunk, then more of them, a pause between.
    script = [
        _text("user_message_chunk"),
        "pause",
        _text("agent_message_chunk"),
        "pause",
        _text("agent_thought_chunk"),
        _text("agent_message_chunk"),
    ]
    agent, client = ChunkAgent(script), ClockClient()
    before = await _run(pair, counter, agent, client)
    first_sent, first_done = agent.sent[1]  # the first agent chunk
    first_received = client.received[1]
    turns = _turns(exporter)
    agent_ttfc = turns[SpanKind.SERVER].attributes["acp.turn.time_to_first_chunk"]
    client_ttfc = turns[SpanKind.CLIENT].attributes["acp.turn.time_to_first_chunk"]
    # Both turns started before the agent's handler ran and after `before`; the first agent chunk was seen
    # after it was sent, and by the agent's side before its send returned, by the client's before its handler.
    assert first_sent - agent.entered <= agent_ttfc <= first_done - before
    assert first_sent - agent.entered <= client_ttfc <= first_received - before
    assert first_sent - agent.entered >= PAUSE  # the user chunk, a pause earlier, did not start the clock
    # The metric records the agent side's value only (the side closest to the agent: each turn counted once).
    (point,) = _points(reader, "acp.turn.time_to_first_chunk")
    assert point.count == 1 and point.sum == pytest.approx(agent_ttfc)


async def test_user_chunks_alone_give_no_first_chunk_time(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    await _run(pair, counter, ChunkAgent([_text("user_message_chunk"), _text("user_message_chunk")]))
    for turn in _turns(exporter).values():
        assert turn.attributes["acp.turn.user_message_chunk.count"] == 2
        assert "acp.turn.time_to_first_chunk" not in turn.attributes
    assert _points(reader, "acp.turn.time_to_first_chunk") == []
    assert sum(p.count for p in _points(reader, "gen_ai.invoke_agent.duration")) == 1  # the turns were recorded:
    assert sum(p.count for p in _points(reader, "gen_ai.client.operation.duration")) == 1  # agent's, editor's


# Each value at or just past a bound of an OTel int attribute (64-bit signed) or of a token count (>= 0).
HOSTILE_USAGE = {
    "inputTokens": 2**63 - 1,  # the largest kept
    "outputTokens": 2**70,  # as in the hostile corpus: dropped
    "totalTokens": 2**63,  # just past: dropped
    "thoughtTokens": -1,  # negative: dropped
    "cachedReadTokens": 0,  # the smallest kept
    "cachedWriteTokens": True,  # a JSON boolean, not a count: dropped
}


async def test_usage_outside_the_range_is_dropped_field_by_field(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    # One streamed chunk: the client sees the agent is traced, so only the agent reports the usage.
    agent = ChunkAgent([_text("agent_message_chunk")], {"stopReason": "end_turn", "usage": HOSTILE_USAGE})
    await _run(pair, counter, agent, hostile=True)
    turn = _turns(exporter)[SpanKind.SERVER]  # the agent's side reports usage
    usage = {k: v for k, v in turn.attributes.items() if k.startswith(("gen_ai.usage.", "acp.usage."))}
    assert usage == {
        "gen_ai.usage.input_tokens": 2**63 - 1,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "acp.usage.source": "turn",
    }
    # The token counters count the kept input tokens once (the reporting side) and no output tokens.
    assert [p.value for p in _points(reader, "acp.turn.usage.input_tokens")] == [2**63 - 1]
    assert _points(reader, "acp.turn.usage.output_tokens") == []


class ErrorAgent(TraceAgent):
    """Ends each turn with the stop reason the prompt names; answers ``test.dev/fail`` with the code it names."""

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        return {"stopReason": prompt[0]["text"] if isinstance(prompt[0], dict) else prompt[0].text}

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "test.dev/fail":
            raise RequestError(int(params["code"]), "no")
        return await super().ext_method(method, params)


DISTINCT = 40  # more distinct values than any bound


async def test_request_error_types_in_metrics_are_bounded(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    p = await pair(ErrorAgent(), TraceClient())
    await open_session(p.client_conn)
    for i in range(DISTINCT):
        with pytest.raises(RequestError):
            await p.client_conn.ext_method("test.dev/fail", {"code": -31000 - i})
    await wait_spans_closed(counter)
    for name in ("acp.client.operation.duration", "acp.server.operation.duration"):
        points = [pt for pt in _points(reader, name) if pt.attributes["acp.method.name"] == "_test.dev/fail"]
        error_types = {pt.attributes["error.type"] for pt in points}
        assert sum(pt.count for pt in points) == DISTINCT
        assert "_OTHER" in error_types and len(error_types) <= 33, error_types  # 32 distinct, then _OTHER
        assert error_types - {"_OTHER"} <= {str(-31000 - i) for i in range(DISTINCT)}


async def test_stop_reasons_in_metrics_are_bounded(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    p = await pair(ErrorAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    for i in range(DISTINCT):
        try:  # an unknown stop reason: the client's SDK may reject the response; the agent's side still ends it
            await prompt(p.client_conn, session_id, f"vendor_reason_{i}")
        except Exception:
            pass
    await prompt(p.client_conn, session_id, "refusal")  # a known reason is kept after the bound is reached
    await wait_spans_closed(counter)
    points = _points(reader, "gen_ai.invoke_agent.duration")
    reasons = {pt.attributes.get("acp.stop_reason") for pt in points}
    assert sum(pt.count for pt in points) >= DISTINCT + 1
    assert "_OTHER" in reasons and "refusal" in reasons
    assert len(reasons - {None, "refusal", "_OTHER"}) <= 8, reasons  # 8 distinct unknown ones, then _OTHER
