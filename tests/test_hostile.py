"""Hostile and malformed input: an instrumented agent or client behaves exactly as an uninstrumented one.

Each case is sent as raw NDJSON over a loopback socket, first with the instrumentation off, then on, in
the same process; results, errors, handler arguments (minus the three W3C ``_meta`` keys) and the
application's logs must be identical, nothing may be raised from acp_otel, and every span must end.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from acp_app import initialize
from agent_process import agent_process
from hostile_corpus import BAGGAGE_VALUES, INCOMING, OUTGOING_ANSWERS, outgoing_calls
from hostile_harness import (
    assert_no_baggage_in_spans,
    assert_same_incoming,
    assert_same_outgoing,
    incoming_exchange,
    outgoing_exchange,
    run_off_then_on,
)
from spans import SpanCounter, one


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks) for c in INCOMING])
async def test_incoming_hostile_input(case: Any, instrument: Any, counter: SpanCounter, exporter: Any) -> None:
    plain_run, traced = await run_off_then_on(
        instrument, incoming_exchange, case.side, list(case.lines), counter=counter
    )
    assert_same_incoming(plain_run, traced, case.name)
    assert not counter.open, f"spans left open: {counter.open}"
    assert counter.started == counter.ended
    if not traced.disconnected:
        assert counter.started > 0  # the sentinel request at least was traced
    assert_no_baggage_in_spans(exporter.get_finished_spans(), BAGGAGE_VALUES, case.name)


OUT_CALLS = outgoing_calls()
OUT_MATRIX = [
    (c, a)
    for c in OUT_CALLS
    for a in OUTGOING_ANSWERS
    if c.startswith("client:session/new")
    or a.name in ("plain-result", "neither-result-nor-error", "error-odd-members", "duplicate", "unknown-id")
]


@pytest.mark.parametrize(("call_name", "answer"), OUT_MATRIX, ids=[f"{c}|{a.name}" for c, a in OUT_MATRIX])
async def test_outgoing_hostile_responses(
    call_name: str, answer: Any, instrument: Any, counter: SpanCounter, exporter: Any
) -> None:
    side, call = OUT_CALLS[call_name]
    plain_run, traced = await run_off_then_on(
        instrument, outgoing_exchange, side, call, answer.respond, counter=counter
    )
    assert_same_outgoing(plain_run, traced, f"{call_name}|{answer.name}")
    assert traced.request_seen  # every call here sends its request
    assert not counter.open, f"spans left open: {counter.open}"
    assert counter.started == counter.ended
    client_spans = [s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"]
    assert len(client_spans) == 1, [s.name for s in exporter.get_finished_spans()]
    if traced.caller[0] == "raised":
        assert client_spans[0].status.status_code.name == "ERROR"
        assert client_spans[0].attributes["error.type"] in (traced.caller[1], str(traced.caller[2]))
    elif traced.caller[0] == "hung":  # the caller gave up: the span ends as cancelled
        assert client_spans[0].attributes.get("acp.cancelled") is True
    else:
        assert client_spans[0].status.status_code.name == "UNSET"


async def test_outgoing_params_of_the_caller_are_not_mutated(
    instrument: Any, counter: SpanCounter, exporter: Any
) -> None:
    params = {"a": 1, "_meta": {"k": "v", "nested": {"x": [1]}}}
    snapshot = copy.deepcopy(params)

    async def call(conn: Any) -> Any:
        return await conn.ext_method("vendor.dev/q", params)

    traced = await outgoing_exchange("agent", call, lambda q: [], counter)
    assert traced.caller == ("result", {"final": True})
    assert params == snapshot
    sent = next(m for m in traced.received if isinstance(m, dict) and "method" in m)
    (client,) = [s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"]
    ctx = client.get_span_context()
    assert sent["params"]["_meta"]["traceparent"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
    assert sent["params"]["_meta"]["k"] == "v"
    assert sent["params"]["_meta"]["nested"] == {"x": [1]}
    assert not counter.open


# ------------------------------------------------------------------------------------------ uninstrumented peer


async def _initialize_uninstrumented_agent() -> tuple[Any, str]:
    """Instrumented client (this process) -> NoKwargsAgent in a subprocess that is *not* instrumented;
    returns what the client saw and the agent's stderr."""
    result: Any
    async with agent_process("nokwargs") as agent:
        try:
            result = ("ok", await asyncio.wait_for(initialize(agent.conn), 20))
        except Exception as exc:
            result = ("raised", type(exc).__name__, getattr(exc, "code", None), getattr(exc, "data", None))
        if result[0] == "ok":
            session = await asyncio.wait_for(agent.conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
            result = (*result, session.session_id)
    assert agent.returncode == 0 and not agent.killed, (agent.returncode, agent.stderr[-2000:])
    return result, agent.stderr


async def test_uninstrumented_nokwargs_agent_breaks_with_default_injection(
    instrument: Any, exporter: Any, counter: SpanCounter
) -> None:
    """ACP-META-001 requires agents to accept ``_meta.traceparent``; an SDK agent whose ``initialize``
    lacks ``**kwargs`` does not, and fails with -32603 once the editor injects trace context."""
    result, stderr = await _initialize_uninstrumented_agent()
    assert result[0] == "raised" and result[1] == "RequestError" and result[2] == -32603, result
    assert "traceparent" in json.dumps(result[3]) or "traceparent" in stderr
    span = one(exporter.get_finished_spans(), "initialize", "CLIENT")
    assert span.status.status_code.name == "ERROR"
    assert not counter.open


@pytest.mark.parametrize(
    ("options", "env"),
    [
        ({"inject": False}, {}),
        ({"inject_excluded_methods": ["initialize"]}, {}),
        ({}, {"OTEL_PYTHON_ACP_INJECT_EXCLUDED_METHODS": "initialize"}),
    ],
    ids=["inject-false", "excluded-option", "excluded-env"],
)
async def test_uninstrumented_nokwargs_agent_works_without_injection(
    options: dict[str, Any],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    instrument: Any,
    exporter: Any,
    counter: SpanCounter,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    instrument(**options)
    result, _ = await _initialize_uninstrumented_agent()
    assert result[0] == "ok", result
    spans = exporter.get_finished_spans()
    init = one(spans, "initialize", "CLIENT")  # spans are still recorded
    one(spans, "session/new", "CLIENT")
    assert init.status.status_code.name == "UNSET"
    assert init.attributes.get("gen_ai.agent.name") is None  # NoKwargsAgent sends no agentInfo
    assert not counter.open
