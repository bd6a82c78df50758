"""An export of the agent's that the proxy's receiver refuses (a body it cannot decode) is a loss like any other:
said in the proxy's one exit line, with the count and the reason. Real processes: the proxy and a synthetic
agent that posts one undecodable OTLP/JSON request beside its good spans."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import base_env
from otlp_backend import Backend
from promise_runs import agent_command, agent_spans, run

pytestmark = pytest.mark.e2e


async def test_a_refused_export_is_counted_in_the_exit_line(tmp_path: Path) -> None:
    plan = {
        "turn": [
            {
                "post_json": {
                    "resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "$SPAN1", "startTimeUnixNano": "soon"}]}]}]
                }
            },
            {"post_json": {"resourceSpans": "not a list"}},
            {"span": "chat fine", "attrs": {"gen_ai.operation.name": "chat"}},
            {"flush": True},
        ]
    }
    with Backend() as backend:
        env = base_env(OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint, OTEL_METRICS_EXPORTER="none")
        proxied = await run(agent_command(tmp_path, "none", plan), env)
        assert backend.wait_for(lambda b: any(s["name"] == "chat fine" for s in agent_spans(b)))
    assert proxied.returncode == 0, proxied.stderr
    lines = [line for line in proxied.stderr.splitlines() if line.startswith("acp-otel proxy: telemetry:")]
    assert len(lines) == 1, proxied.stderr
    assert "2 of the agent's export requests refused by the proxy's receiver (traces: not an OTLP/JSON" in lines[0]
    assert "Traceback" not in proxied.stderr


async def test_nothing_refused_nothing_said(tmp_path: Path) -> None:
    plan = {"turn": [{"span": "chat fine", "attrs": {"gen_ai.operation.name": "chat"}}, {"flush": True}]}
    with Backend() as backend:
        env = base_env(OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint, OTEL_METRICS_EXPORTER="none")
        proxied = await run(agent_command(tmp_path, "none", plan), env)
        assert backend.wait_for(lambda b: any(s["name"] == "chat fine" for s in agent_spans(b)))
    assert proxied.returncode == 0 and "acp-otel proxy:" not in proxied.stderr, proxied.stderr
