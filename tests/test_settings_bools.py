"""An invalid boolean in the environment keeps the option's default end to end, with a warning: trace context
is still injected (``inject`` defaults to on) and content still kept out (``capture_content`` defaults to off)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from acp_app import SECRET, TraceAgent, TraceClient, open_session, prompt
from opentelemetry.trace import SpanKind
from spans import all_text, one, parent_of, span_id, wait_spans_closed


async def test_invalid_booleans_keep_their_defaults_on_a_real_pair(
    instrument: Any,
    exporter: Any,
    pair: Any,
    counter: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_ACP_INJECT", "perhaps")
    monkeypatch.setenv("OTEL_PYTHON_ACP_CAPTURE_CONTENT", "perhaps")
    with caplog.at_level(logging.WARNING, logger="acp_otel"):
        instrument()  # reads the environment again
    warned = " | ".join(r.getMessage() for r in caplog.records if r.name == "acp_otel")
    assert "OTEL_PYTHON_ACP_INJECT" in warned and "OTEL_PYTHON_ACP_CAPTURE_CONTENT" in warned
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, SECRET)
    await wait_spans_closed(counter)
    spans = exporter.get_finished_spans()
    # injected: the agent's span of session/new is the child of the editor's (its context came in params._meta)
    client, server = one(spans, "session/new", SpanKind.CLIENT), one(spans, "session/new", SpanKind.SERVER)
    assert parent_of(server) == span_id(client)
    assert SECRET not in all_text(spans)  # content still not captured
