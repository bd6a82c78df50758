"""Usage, cost and context window of a turn, reported once across processes (the ``usage`` option), on the
real SDK: a traced editor and agent in this process, an untraced agent process, a traced editor behind the
proxy; hostile values; the cost metric's attributes; the turn span's name; no attribute name a namespace."""

from __future__ import annotations

from typing import Any

import pytest
from acp_app import SECRET, TraceAgent, UsageAgent, initialize, open_session, prompt
from agent_process import agent_process
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from spans import wait_spans_closed
from test_agent_turns import ScriptAgent

from acp_otel import _semconv as sc
from acp_otel._engine import Engine
from acp_otel._settings import load_settings

C, S = SpanKind.CLIENT, SpanKind.SERVER
USAGE_KEYS = ("gen_ai.usage.", "acp.usage.")


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def _turns(spans: Any, kind: SpanKind | None = None) -> list[Any]:
    """Turn spans (found by operation, not by name), oldest first."""
    found = [
        s
        for s in spans
        if (s.attributes or {}).get("gen_ai.operation.name") == "invoke_agent" and (kind is None or s.kind == kind)
    ]
    return sorted(found, key=lambda s: s.start_time)


def _usage(span: Any) -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if k.startswith(USAGE_KEYS)}


async def _prompts(pair: Any, counter: Any, agent: Any, texts: list[str]) -> None:
    p = await pair(agent)
    session_id = await open_session(p.client_conn)
    for text in texts:
        await prompt(p.client_conn, session_id, text)
    await wait_spans_closed(counter)


async def test_traced_editor_and_agent_report_usage_once(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    await _prompts(pair, counter, UsageAgent(), ["cost=0.5 used=1000", "cost=1.25 used=3000 in=200"])
    spans = exporter.get_finished_spans()
    first, second = _turns(spans, S)  # the agent's side: the side closest to the agent
    assert _usage(first) == {
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 34,
        "acp.usage.total_tokens": 154,
        "acp.usage.source": "turn",  # an agent without a profile: its counts are the turn's, as ACP says
        "acp.usage.context.used": 1000,
        "acp.usage.context.size": 200000,
        "acp.usage.cost.amount": 0.5,  # the session's first figure: its cumulative cost from zero
        "acp.usage.cost.currency": "USD",
    }
    assert second.attributes["acp.usage.context.used"] == 3000
    assert second.attributes["acp.usage.cost.amount"] == 0.75  # the change of the cumulative cost over the turn
    assert second.attributes["gen_ai.usage.input_tokens"] == 200
    editor = _turns(spans, C)
    assert len(editor) == 2 and not [_usage(s) for s in editor if _usage(s)]  # the editor saw a traced agent
    points = _points(reader)
    (cost,) = points["acp.turn.usage.cost"]  # recorded once across the two sides
    assert cost.value == pytest.approx(1.25)
    assert dict(cost.attributes) == {"gen_ai.agent.name": "test-agent", "acp.usage.cost.currency": "USD"}
    (inputs,) = points["acp.turn.usage.input_tokens"]
    assert inputs.value == 320 and dict(inputs.attributes) == {"gen_ai.agent.name": "test-agent"}


@pytest.mark.parametrize("mode", ["always", "never"])
async def test_usage_option(
    mode: str,
    instrument: Any,
    meter_provider: MeterProvider,
    reader: InMemoryMetricReader,
    exporter: Any,
    pair: Any,
    counter: Any,
) -> None:
    instrument(meter_provider=meter_provider, usage=mode)
    await _prompts(pair, counter, UsageAgent(), ["cost=0.5"])
    turns = _turns(exporter.get_finished_spans())
    assert len(turns) == 2
    reported = [s for s in turns if _usage(s)]
    points = _points(reader)
    if mode == "always":  # both sides, whatever the other does
        assert reported == turns and {s.attributes["acp.usage.cost.amount"] for s in turns} == {0.5}
        assert sum(pt.value for pt in points["acp.turn.usage.cost"]) == pytest.approx(1.0)
    else:
        assert reported == [] and "acp.turn.usage.cost" not in points and "acp.turn.usage.input_tokens" not in points


def test_usage_option_from_the_environment() -> None:
    assert load_settings({}, {"OTEL_PYTHON_ACP_USAGE": " Never "}).usage == "never"
    assert load_settings({"usage": "always"}, {"OTEL_PYTHON_ACP_USAGE": "never"}).usage == "always"
    assert load_settings({}, {"OTEL_PYTHON_ACP_USAGE": "sometimes"}).usage == "auto"  # invalid: the default
    assert load_settings({}, {}).usage == "auto"


async def test_untraced_agent_process_the_editor_reports(instrument: Any, exporter: Any, counter: Any) -> None:
    """The agent process is not instrumented: its updates arrive without trace context, so the editor (this
    process) reports usage, context and cost; the session's cumulative cost becomes a per-turn change."""
    async with agent_process("usage") as agent:
        await initialize(agent.conn)
        session_id = (await agent.conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
        for text in ("cost=2 used=10", "cost=2.5 used=20", "cost=0.25 used=5", "cost=0.5 currency=EUR"):
            assert (await prompt(agent.conn, session_id, text)).stop_reason == "end_turn"
    await wait_spans_closed(counter)
    turns = _turns(exporter.get_finished_spans(), C)
    assert [(s.attributes["acp.usage.cost.amount"], s.attributes["acp.usage.cost.currency"]) for s in turns] == [
        (2.0, "USD"),  # the session's first figure
        (0.5, "USD"),  # 2.5 - 2
        (0.25, "USD"),  # the cumulative cost went down: the session reset, counted from zero
        (0.5, "EUR"),  # another currency: counted from zero
    ]
    assert [s.attributes["acp.usage.context.used"] for s in turns] == [10, 20, 5, 1000]
    assert all(s.attributes["gen_ai.usage.input_tokens"] == 120 for s in turns)


@pytest.mark.e2e
async def test_traced_editor_behind_the_proxy_untraced_agent(instrument: Any, exporter: Any) -> None:
    """Editor traced -> proxy -> untraced agent: the proxy is closest to the agent and reports; the editor,
    whose updates now arrive with the proxy's context, does not."""
    from harness import PY_AGENT, base_env, proxied_client
    from otlp_sink import OtlpSink

    with OtlpSink() as sink:
        async with proxied_client([*PY_AGENT, "usage"], base_env(**sink.env())) as run:
            session_id = await open_session(run.conn)
            await prompt(run.conn, session_id, "cost=0.5 used=7")
        spans = sink.wait_for(lambda s: any(x.attributes.get("acp.stop_reason") == "end_turn" for x in s))
    (proxy_turn,) = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert proxy_turn.attributes["acp.usage.cost.amount"] == 0.5
    assert proxy_turn.attributes["acp.usage.context.used"] == 7
    assert proxy_turn.attributes["gen_ai.usage.input_tokens"] == 120
    (editor_turn,) = _turns(exporter.get_finished_spans(), C)
    assert _usage(editor_turn) == {}


def _cost_update(amount: float) -> dict[str, Any]:
    return {"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": amount, "currency": "USD"}}


async def test_a_turn_with_several_usage_updates_costs_their_sum(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    """Copilot CLI sends a usage_update before each model call: the turn costs the whole change of the session's
    cumulative cost over the turn, not its last step."""
    instrument(meter_provider=meter_provider)
    await _prompts(pair, counter, ScriptAgent([_cost_update(0.5), _cost_update(1.25), _cost_update(2.0)]), ["hi"])
    (turn,) = _turns(exporter.get_finished_spans(), S)
    assert turn.attributes[sc.ACP_USAGE_COST_AMOUNT] == 2.0
    (cost,) = _points(reader)[sc.METRIC_TURN_COST]
    assert cost.value == pytest.approx(2.0)


class QuietSecondTurnAgent(TraceAgent):
    """A traced agent whose first turn streams an update and whose second sends none; both return usage."""

    turns = 0

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self.turns += 1
        if self.turns == 1:
            await self.conn._conn.send_notification(
                "session/update", {"sessionId": session_id, "update": _cost_update(0.0)}
            )
            await self.conn.read_text_file(session_id=session_id, path="/tmp/usage.txt")  # see UsageAgent
        return {"stopReason": "end_turn", "usage": {"inputTokens": 120, "outputTokens": 34, "totalTokens": 154}}


async def test_a_turn_without_updates_after_the_agent_proved_traced_reports_usage_once(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    """The connection already knows the agent traces itself: a turn with no update (nothing to tell it again)
    still leaves usage to the agent's side."""
    instrument(meter_provider=meter_provider)
    await _prompts(pair, counter, QuietSecondTurnAgent(), ["one", "two"])
    spans = exporter.get_finished_spans()
    assert [_usage(s).get(sc.GEN_AI_USAGE_INPUT_TOKENS) for s in _turns(spans, S)] == [120, 120]
    assert [_usage(s) for s in _turns(spans, C)] == [{}, {}]
    (inputs,) = _points(reader)[sc.METRIC_TURN_INPUT_TOKENS]
    assert inputs.value == 240  # each turn counted once


class BoundsAgent(TraceAgent):
    """Each turn sends the usage_updates the test gives for it, and usage with zero input tokens."""

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        super().__init__()
        self.turns = turns

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        for update in self.turns.pop(0):
            await self.conn._conn.send_notification("session/update", {"sessionId": session_id, "update": update})
        await self.conn.read_text_file(session_id=session_id, path="/tmp/usage.txt")  # see UsageAgent
        return {"stopReason": "end_turn", "usage": {"inputTokens": 0, "outputTokens": 7, "totalTokens": 7}}


async def test_usage_values_at_their_bounds(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    """Zero is a figure, 2**63 is not; an integer cost; currencies of 1 and 16 characters; the largest cost; the
    same cumulative cost twice (nothing spent, not a reset); another currency in the middle of a turn."""
    instrument(meter_provider=meter_provider)
    long_currency = "X" * 16

    def update(amount: Any, currency: str = long_currency, **window: int) -> dict[str, Any]:
        return {"sessionUpdate": "usage_update", **window, "cost": {"amount": amount, "currency": currency}}

    turns = [
        [update(0.0, used=0, size=0)],
        [update(1, used=2**63, size=2**63), update(1)],
        [update(2), update(1e12, "E")],
    ]
    await _prompts(pair, counter, BoundsAgent(turns), ["one", "two", "three"])
    first, second, third = (_usage(s) for s in _turns(exporter.get_finished_spans(), S))
    assert first == {
        sc.ACP_USAGE_CONTEXT_USED: 0,
        sc.ACP_USAGE_CONTEXT_SIZE: 0,
        sc.ACP_USAGE_COST_AMOUNT: 0.0,
        sc.ACP_USAGE_COST_CURRENCY: long_currency,
        sc.GEN_AI_USAGE_INPUT_TOKENS: 0,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
        sc.ACP_USAGE_TOTAL_TOKENS: 7,
        sc.ACP_USAGE_SOURCE: "turn",
    }
    assert sc.ACP_USAGE_CONTEXT_USED not in second and sc.ACP_USAGE_CONTEXT_SIZE not in second
    assert (second[sc.ACP_USAGE_COST_AMOUNT], second[sc.ACP_USAGE_COST_CURRENCY]) == (1.0, long_currency)
    assert (third[sc.ACP_USAGE_COST_AMOUNT], third[sc.ACP_USAGE_COST_CURRENCY]) == (1e12, "E")
    (outputs,) = _points(reader)[sc.METRIC_TURN_OUTPUT_TOKENS]
    assert outputs.value == 21 and dict(outputs.attributes) == {sc.GEN_AI_AGENT_NAME: "test-agent"}


HOSTILE = [
    {"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": 0.25, "currency": "USD"}},
    {"sessionUpdate": "usage_update", "used": -5, "size": 2**70, "cost": {"amount": -1, "currency": "USD"}},
    {"sessionUpdate": "usage_update", "used": "many", "size": True, "cost": {"amount": "12", "currency": "USD"}},
    {"sessionUpdate": "usage_update", "used": 1.5, "cost": {"amount": 2**70, "currency": "USD"}},
    {"sessionUpdate": "usage_update", "cost": {"amount": 1e300, "currency": "USD"}},
    {"sessionUpdate": "usage_update", "cost": {"amount": True, "currency": "USD"}},
    {"sessionUpdate": "usage_update", "cost": {"amount": 1.0, "currency": 5}},
    {"sessionUpdate": "usage_update", "cost": {"amount": 1.0, "currency": "X" * 100}},
    {"sessionUpdate": "usage_update", "cost": {"amount": 1.0, "currency": ""}},
    {"sessionUpdate": "usage_update", "cost": [1, 2]},
    {"sessionUpdate": "usage_update", "cost": None, "used": None},
]


async def test_hostile_usage_values_are_ignored(instrument: Any, exporter: Any, pair: Any, counter: Any) -> None:
    # Out of range for a 64-bit attribute, though valid for the SDK's models (which reject negative and
    # non-numeric token counts before they are sent; the proxy's hostile corpus sends those raw).
    usage = {"inputTokens": 2**70, "outputTokens": 2**64, "totalTokens": 2**63, "thoughtTokens": 5}
    await _prompts(pair, counter, ScriptAgent(HOSTILE, usage=usage), ["hi"])
    (turn,) = _turns(exporter.get_finished_spans(), S)
    assert _usage(turn) == {  # only the valid figures: the first update's, and the one valid token count
        "acp.usage.context.used": 10,
        "acp.usage.context.size": 100,
        "acp.usage.cost.amount": 0.25,
        "acp.usage.cost.currency": "USD",
        "gen_ai.usage.reasoning.output_tokens": 5,
        "acp.usage.source": "turn",
    }


async def test_cost_metric_attributes_are_bounded(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    await _prompts(pair, counter, UsageAgent(), [f"cost=1 currency=C{i}" for i in range(12)])
    points = _points(reader)["acp.turn.usage.cost"]
    assert all(set(pt.attributes) == {"gen_ai.agent.name", "acp.usage.cost.currency"} for pt in points)
    currencies = {pt.attributes["acp.usage.cost.currency"]: pt.value for pt in points}
    assert len(currencies) == 9 and currencies["_OTHER"] == pytest.approx(4.0)  # 8 kept, the rest bounded
    assert sum(currencies.values()) == pytest.approx(12.0)
    assert "sess-" not in repr([dict(pt.attributes) for pt in points])  # never a session id


class NamelessAgent(TraceAgent):
    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {"protocolVersion": 1, "agentCapabilities": {}}


@pytest.mark.parametrize("agent", [TraceAgent, NamelessAgent])
async def test_turn_span_name(agent: type, instrument: Any, exporter: Any, pair: Any, counter: Any) -> None:
    await _prompts(pair, counter, agent(), ["hello"])
    turns = _turns(exporter.get_finished_spans())
    expected = "session/prompt test-agent" if agent is TraceAgent else "session/prompt"
    assert sorted((s.name, s.kind.name) for s in turns) == [(expected, "CLIENT"), (expected, "SERVER")]


async def test_no_attribute_name_is_also_a_namespace(instrument: Any, exporter: Any, pair: Any, counter: Any) -> None:
    """OpenTelemetry's naming rule: a name must not coincide with a namespace (``a.b`` beside ``a.b.c``)."""
    instrument(capture_content=True, notification_spans="events")
    p = await pair(UsageAgent())
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "cost=1")
    await p.client_conn.ext_method("test.dev/ping", {"value": 1})
    await wait_spans_closed(counter)
    p2 = await pair(TraceAgent())
    session_id = await open_session(p2.client_conn)
    await prompt(p2.client_conn, session_id, "hello")
    await wait_spans_closed(counter)
    names: set[str] = set()
    for span in exporter.get_finished_spans():
        names.update(span.attributes or {})
        for event in span.events:
            names.update(event.attributes or {})
    assert {"acp.method.extension", "acp.session.update.kind", "acp.usage.cost.amount"} <= names
    clashes = sorted((a, b) for a in names for b in names if b.startswith(a + "."))
    assert not clashes, clashes


def test_streamed_text_kept_is_bounded() -> None:
    """With capture on, the agent's streamed text is kept only up to the max length, however long the turn."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = Engine(
        provider.get_tracer("t"), load_settings({"capture_content": True, "capture_content_max_length": 50})
    )
    peer = TraceAgent()  # any weak-referenceable object stands for a connection
    params = {"sessionId": "s", "prompt": [{"type": "text", "text": "q" * 500}]}
    call, _ = engine.begin_outgoing(peer, "session/prompt", params, 1, parent=Context())
    assert call is not None and call.turn is not None
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": SECRET * 10}}
    for _ in range(1000):
        engine.begin_outgoing(peer, "session/update", {"sessionId": "s", "update": chunk}, is_request=False)
    assert call.turn.output_len == 50 and sum(map(len, call.turn.output or [])) == 50
    engine.end_result(call, {"stopReason": "end_turn"})
    (span,) = exporter.get_finished_spans()
    a = span.attributes
    assert a["output.value"] == (SECRET * 10)[:50] and a["input.value"] == "q" * 50
    assert len(a["gen_ai.input.messages"]) <= 50 and len(a["gen_ai.output.messages"]) <= 50
    provider.shutdown()
