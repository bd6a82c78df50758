"""Instrument / uninstrument life cycle, the SDK's own spans, import order and the entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import wrapt
from acp_app import initialize
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from spans import find

from acp_otel import AcpInstrumentor

HOOKS = ("__init__", "send_request", "send_notification", "_run_notification")


def _originals() -> dict[str, Any]:
    import acp.connection

    conn = acp.connection.Connection
    names = [*HOOKS, "_execute_request" if "_execute_request" in conn.__dict__ else "_run_request"]
    found = {name: conn.__dict__[name] for name in names}
    found["span_context"] = acp.connection.__dict__["span_context"]
    return found


@pytest.fixture(scope="module")
def global_exporter() -> InMemorySpanExporter:
    """The SDK's own spans go to the global provider (acp.telemetry uses trace.get_tracer)."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def sdk_spans(global_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    global_exporter.clear()
    yield global_exporter


async def test_uninstrument_restores_everything(provider: Any, exporter: Any, pair: Any) -> None:
    before = _originals()
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    during = _originals()
    assert all(isinstance(during[name], wrapt.FunctionWrapper) for name in before)
    instrumentor.uninstrument()
    after = _originals()
    assert all(after[name] is before[name] for name in before)
    p = await pair()
    await initialize(p.client_conn)
    assert exporter.get_finished_spans() == ()


async def test_cycles_never_stack_wrappers(provider: Any, exporter: Any, pair: Any) -> None:
    before = _originals()
    instrumentor = AcpInstrumentor()
    for _ in range(3):
        instrumentor.instrument(tracer_provider=provider)
        instrumentor.instrument(tracer_provider=provider)  # a second call is refused, not stacked
        wrapped = _originals()
        assert all(wrapped[name].__wrapped__ is before[name] for name in before)
        instrumentor.uninstrument()
    instrumentor.instrument(tracer_provider=provider)
    try:
        p = await pair()
        await initialize(p.client_conn)
    finally:
        instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    assert len(find(spans, "initialize", SpanKind.CLIENT)) == 1
    assert len(find(spans, "initialize", SpanKind.SERVER)) == 1


async def test_connections_built_while_instrumented_pass_through_after(provider: Any, exporter: Any, pair: Any) -> None:
    # Up to SDK 0.12.0 a connection keeps the bound hooks it was built with.
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    p = await pair()
    instrumentor.uninstrument()
    response = await initialize(p.client_conn)
    assert response.protocol_version == 1
    assert exporter.get_finished_spans() == ()


async def test_sdk_spans_suppressed_then_restored(provider: Any, sdk_spans: Any, pair: Any) -> None:
    p = await pair()
    await initialize(p.client_conn)  # not instrumented: the SDK's own span appears
    assert [s.name for s in sdk_spans.get_finished_spans()] == ["acp.request"]
    sdk_spans.clear()
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        p = await pair()
        await initialize(p.client_conn)
        assert sdk_spans.get_finished_spans() == ()
    finally:
        instrumentor.uninstrument()
    p = await pair()
    await initialize(p.client_conn)
    assert [s.name for s in sdk_spans.get_finished_spans()] == ["acp.request"]


async def test_keep_sdk_spans_option(provider: Any, exporter: Any, sdk_spans: Any, pair: Any) -> None:
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider, keep_sdk_spans=True)
    try:
        p = await pair()
        await initialize(p.client_conn)
    finally:
        instrumentor.uninstrument()
    (sdk_span,) = sdk_spans.get_finished_spans()
    server = find(exporter.get_finished_spans(), "initialize", SpanKind.SERVER)[0]
    # the kept SDK span now nests under our SERVER span instead of floating alone
    assert sdk_span.parent.span_id == server.get_span_context().span_id


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, env=full_env
    )


def test_instrument_before_acp_is_imported() -> None:
    result = _run(
        """
        import sys
        from acp_otel import AcpInstrumentor
        AcpInstrumentor().instrument()
        assert "acp.connection" not in sys.modules
        import acp
        from acp.connection import Connection
        print(type(Connection.__dict__["send_request"]).__name__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "FunctionWrapper"


@pytest.mark.parametrize("disabled", ["", "acp"])
def test_opentelemetry_instrument_entry_point(disabled: str) -> None:
    bindir = os.path.dirname(sys.executable)
    code = (
        "import acp.connection, json; "
        "print(json.dumps(type(acp.connection.Connection.__dict__['send_request']).__name__))"
    )
    result = subprocess.run(
        [os.path.join(bindir, "opentelemetry-instrument"), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled,
        },
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ("function" if disabled else "FunctionWrapper")


def test_invalid_options_warn_and_use_defaults(caplog: Any) -> None:
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(capture_content="maybe", capture_content_max_length=-3, notification_spans="loud")
    try:
        settings = instrumentor.settings
        assert settings is not None
        assert settings.capture_content is False
        assert settings.capture_content_max_length == 1024
        assert settings.notification_spans == "all"
    finally:
        instrumentor.uninstrument()
    assert sum("invalid value" in r.getMessage() or "must be" in r.getMessage() for r in caplog.records) == 3
