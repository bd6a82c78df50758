"""Hostile and malformed input: an instrumented agent or client behaves exactly as an uninstrumented one.

Each case is sent as raw NDJSON over a loopback socket, first with the instrumentation off, then on, in
the same process; results, errors, handler arguments (minus the three W3C ``_meta`` keys) and the
application's logs must be identical, nothing may be raised from acp_otel, and every span must end.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hostile_corpus import BAGGAGE_VALUES, INCOMING, OUTGOING_ANSWERS, TP_VALID, outgoing_calls
from hostile_harness import (
    SpanCounter,
    Switch,
    assert_same_incoming,
    assert_same_outgoing,
    attribute_values,
    incoming_exchange,
    outgoing_exchange,
)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def counter(provider: Any) -> SpanCounter:
    c = SpanCounter()
    provider.add_span_processor(c)
    return c


def test_corpus_is_large_enough() -> None:
    assert len(INCOMING) + len(OUTGOING_ANSWERS) >= 50


@pytest.mark.parametrize("case", INCOMING, ids=[c.name for c in INCOMING])
async def test_incoming_hostile_input(case: Any, instrument: Any, counter: SpanCounter, exporter: Any) -> None:
    switch = Switch(instrument)
    switch.off()
    plain_run = await incoming_exchange(case.side, list(case.lines))
    assert counter.started == 0
    switch.on()
    traced = await incoming_exchange(case.side, list(case.lines), counter)
    assert_same_incoming(plain_run, traced, case.name)
    assert not counter.open, f"spans left open: {counter.open}"
    assert counter.started == counter.ended
    if not traced.disconnected:
        assert counter.started > 0  # the sentinel request at least was traced
    for span in exporter.get_finished_spans():  # incoming baggage never becomes an attribute
        for value in attribute_values(span):
            assert value not in BAGGAGE_VALUES, (case.name, span.name, value)
            assert not (isinstance(value, str) and any(b in value for b in BAGGAGE_VALUES)), (case.name, span.name)


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
    switch = Switch(instrument)
    switch.off()
    plain_run = await outgoing_exchange(side, call, answer.respond)
    switch.on()
    traced = await outgoing_exchange(side, call, answer.respond, counter)
    assert_same_outgoing(plain_run, traced, f"{call_name}|{answer.name}")
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


async def test_outgoing_params_of_the_caller_are_not_mutated(instrument: Any, counter: SpanCounter) -> None:
    params = {"a": 1, "_meta": {"k": "v", "nested": {"x": [1]}}}
    snapshot = copy.deepcopy(params)

    async def call(conn: Any) -> Any:
        return await conn.ext_method("vendor.dev/q", params)

    traced = await outgoing_exchange("agent", call, lambda q: [])
    assert traced.caller == ("result", {"final": True})
    assert params == snapshot
    sent = next(m for m in traced.received if isinstance(m, dict) and "method" in m)
    assert sent["params"]["_meta"]["traceparent"] != TP_VALID
    assert sent["params"]["_meta"]["k"] == "v"
    assert not counter.open


# ------------------------------------------------------------------------------------------ uninstrumented peer


def _spawn_agent(extra_env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, os.path.join(HERE, "plain_nokwargs_agent.py")]


async def _initialize_uninstrumented_agent() -> Any:
    """Instrumented client (this process) -> NoKwargsAgent in a subprocess that is *not* instrumented."""
    import asyncio

    from acp import ClientSideConnection
    from acp_app import TraceClient, initialize

    proc = await asyncio.create_subprocess_exec(
        *_spawn_agent(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": HERE},
        limit=2**24,
    )
    assert proc.stdin is not None and proc.stdout is not None
    conn = ClientSideConnection(lambda c: TraceClient(), proc.stdin, proc.stdout)
    try:
        try:
            result: Any = ("ok", await asyncio.wait_for(initialize(conn), 20))
        except Exception as exc:
            result = ("raised", type(exc).__name__, getattr(exc, "code", None), getattr(exc, "data", None))
        if result[0] == "ok":
            session = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
            result = (*result, session.session_id)
    finally:
        await conn.close()
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        assert proc.stderr is not None
        result = (*result, (await proc.stderr.read()).decode("utf-8", "replace"))
    return result


async def test_uninstrumented_nokwargs_agent_breaks_with_default_injection(
    instrument: Any, exporter: Any, counter: SpanCounter
) -> None:
    """ACP-META-001 requires agents to accept ``_meta.traceparent``; an SDK agent whose ``initialize``
    lacks ``**kwargs`` does not, and fails with -32603 once the editor injects trace context."""
    result = await _initialize_uninstrumented_agent()
    assert result[0] == "raised" and result[1] == "RequestError" and result[2] == -32603, result
    assert "traceparent" in json.dumps(result[3]) or "traceparent" in result[-1]
    span = next(s for s in exporter.get_finished_spans() if s.name == "initialize")
    assert span.status.status_code.name == "ERROR"
    assert not counter.open


@pytest.mark.parametrize("options", [{"inject": False}, {"inject_excluded_methods": ["initialize"]}])
async def test_uninstrumented_nokwargs_agent_works_without_injection(
    options: dict[str, Any], instrument: Any, exporter: Any, counter: SpanCounter
) -> None:
    instrument(**options)
    result = await _initialize_uninstrumented_agent()
    assert result[0] == "ok", result
    names = [s.name for s in exporter.get_finished_spans()]
    assert "initialize" in names and "session/new" in names  # spans are still recorded
    init = next(s for s in exporter.get_finished_spans() if s.name == "initialize")
    assert init.status.status_code.name == "UNSET"
    assert init.attributes.get("acp.agent.name") is None  # NoKwargsAgent sends no agentInfo
    assert not counter.open


async def test_uninstrumented_nokwargs_agent_env_setting(monkeypatch: Any, instrument: Any, exporter: Any) -> None:
    monkeypatch.setenv("OTEL_PYTHON_ACP_INJECT_EXCLUDED_METHODS", "initialize")
    instrument()
    result = await _initialize_uninstrumented_agent()
    assert result[0] == "ok", result
