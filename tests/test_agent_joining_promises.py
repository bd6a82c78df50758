"""What ``acp-otel proxy --agent-telemetry`` promises of joining the agent's spans to the turns, through the real
proxy and a synthetic agent exporting with the real OpenTelemetry SDK (``tests/proxy_peers/promise_agent.py``):
turns end (what the agent does between and after turns stays out of them), a child exported before its parent
waits for it (the SDK's batch delay, 5 s by default), OTLP/JSON ids as the JavaScript agents send them, and the
proxy's own reports (tool calls, usage) kept for what the agent does not report itself. The agent's spans are
model calls and agent invocations (what the proxy forwards by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import base_env
from otlp_backend import Backend
from promise_runs import agent_command, agent_spans, proxy_turns, run

pytestmark = pytest.mark.e2e

CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted"}


def _env(backend: Backend) -> dict[str, str]:
    return base_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint,
        OTEL_METRICS_EXPORTER="none",
        OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS="all",
    )


def _named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


async def _spans(tmp: Path, plan: dict[str, Any], profile: str = "none", last: str = "", **options: Any) -> Any:
    """The backend's spans of a run: (the agent's, the proxy's turns, every span), once ``last`` arrived."""
    with Backend() as backend:
        proxied = await run(agent_command(tmp, profile, plan), _env(backend), **options)
        assert proxied.returncode == 0, proxied.stderr
        assert backend.wait_for(lambda b: bool(_named(agent_spans(b), last))), proxied.stderr
        return agent_spans(backend), proxy_turns(backend), backend.spans()


async def test_what_the_agent_does_between_and_after_turns_stays_out_of_them(tmp_path: Path) -> None:
    plan = {
        "turn": [{"span": "chat in turn", "attrs": CHAT}, {"flush": True}],
        "after_turn": [{"span": "chat between turns", "attrs": CHAT}, {"flush": True}],  # 0.5 s after the answer
        "at_exit": [{"span": "chat at exit", "attrs": CHAT}, {"flush": True}],
    }
    agent, turns, _ = await _spans(tmp_path, plan, last="chat at exit", turns=2, pause=1.0)
    assert len(turns) == 2
    turn_spans = {(t["trace_id"], t["span_id"]) for t in turns}
    inside = _named(agent, "chat in turn")
    assert len(inside) == 2 and {(s["trace_id"], s["parent"]) for s in inside} == turn_spans
    outside = _named(agent, "chat between turns") + _named(agent, "chat at exit")
    assert len(outside) == 3
    for span in outside:  # neither pulled into a turn nor linked to one
        assert span["parent"] is None and span["trace_id"] not in {t for t, _ in turn_spans}, span
        assert span["links"] == [], span


async def test_a_child_exported_before_its_parent_waits_for_it(tmp_path: Path) -> None:
    # The child ends and is exported first; its parent 1.5 s later (a batch processor's delay, shorter than the
    # SDK's default 5 s): the child stays under its parent, in the turn's trace.
    plan = {
        "turn": [
            {"span": "invoke_agent worker", "ref": "agent", "attrs": {"gen_ai.operation.name": "invoke_agent"}},
            {"span": "chat child", "parent": "agent", "attrs": CHAT},
            {"flush": True},
            {"sleep": 1.5},
            {"end_span": "agent"},
            {"flush": True},
        ]
    }
    plan["turn"][0]["end"] = False
    agent, turns, _ = await _spans(tmp_path, plan, last="invoke_agent worker")
    (turn,) = turns
    (parent,) = _named(agent, "invoke_agent worker")
    (child,) = _named(agent, "chat child")
    assert (parent["trace_id"], parent["parent"]) == (turn["trace_id"], turn["span_id"])
    assert (child["trace_id"], child["parent"]) == (turn["trace_id"], parent["span_id"])


def _json_span(span_id: str, name: str, parent: str = "") -> dict[str, Any]:
    """A span as the JavaScript OTLP/JSON exporter (Gemini CLI, Qwen Code, OpenCode) writes it: hex ids, times as
    decimal strings, enums as numbers, attributes as key/value objects."""
    span: dict[str, Any] = {
        "traceId": "$TRACE",
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": "$NOW",
        "endTimeUnixNano": "$NOW",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": 12}},
        ],
        "droppedAttributesCount": 0,
        "events": [],
        "droppedEventsCount": 0,
        "status": {"code": 0},
        "links": [],
        "droppedLinksCount": 0,
    }
    if parent:
        span["parentSpanId"] = parent
    return span


async def test_otlp_json_ids_are_read_as_hex(tmp_path: Path) -> None:
    payload = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "promise-agent"}}],
                    "droppedAttributesCount": 0,
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "gemini-cli", "version": "0.61.0"},
                        "spans": [  # the child first, as batches often have it
                            _json_span("$SPAN2", "chat json child", parent="$SPAN1"),
                            _json_span("$SPAN1", "llm_call json"),
                        ],
                    }
                ],
            }
        ]
    }
    plan = {"turn": [{"post_json": payload}]}
    agent, turns, _ = await _spans(tmp_path, plan, last="llm_call json")
    (turn,) = turns
    (parent,) = _named(agent, "llm_call json")
    (child,) = _named(agent, "chat json child")
    assert (parent["trace_id"], parent["parent"]) == (turn["trace_id"], turn["span_id"])
    assert (child["trace_id"], child["parent"]) == (turn["trace_id"], parent["span_id"])
    assert child["attributes"]["gen_ai.usage.input_tokens"] == 12


def _proxy_tools(spans: list[dict[str, Any]], trace_id: str) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s["service"] == "proxy" and s["name"].startswith("execute_tool") and s["trace_id"] == trace_id
    ]


async def test_an_agent_that_reports_only_usage_leaves_its_tool_calls_to_the_proxy(tmp_path: Path) -> None:
    # Gemini CLI's spans carry tokens, not tool calls: the proxy keeps reporting the tool calls, every turn.
    usage = {**CHAT, "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3}
    plan = {"turn": [{"span": "chat with usage", "attrs": usage}, {"tool_call": True}, {"flush": True}]}
    _, turns, spans = await _spans(tmp_path, plan, "gemini-cli", last="chat with usage", turns=3, pause=0.5)
    assert len(turns) == 3
    for turn in turns:
        assert len(_proxy_tools(spans, turn["trace_id"])) == 1, turn


async def test_an_agent_that_reports_only_tool_calls_leaves_usage_to_the_proxy(tmp_path: Path) -> None:
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read", "gen_ai.tool.call.id": "$TOOL"}
    plan = {
        "turn": [{"tool_call": True}, {"span": "execute_tool read", "attrs": tool}, {"flush": True}],
        "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15},
    }
    _, turns, _ = await _spans(tmp_path, plan, last="execute_tool read", turns=3, pause=0.5)
    assert len(turns) == 3
    for turn in turns:
        assert turn["attributes"].get("gen_ai.usage.input_tokens") == 12, turn
