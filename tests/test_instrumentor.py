"""The SDK's own spans, import order, the entry point and option handling.

Restoring and not stacking the SDK hooks is tested in test_core_sdk_compat.py, on every SDK release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from acp_app import initialize
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.test.globals_test import reset_trace_globals
from opentelemetry.trace import SpanKind
from spans import one

from acp_otel import AcpInstrumentor


@pytest.fixture(scope="module")
def global_exporter() -> Iterator[InMemorySpanExporter]:
    """The SDK's own spans go to the global provider: set one for this module, reset the globals after it.

    Once per module, because ``acp.telemetry`` keeps the tracer it got at import, which stays bound to the
    first global provider it saw.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        reset_trace_globals()
        # The SDK's ProxyTracer (acp.telemetry.TRACER) cached this provider's tracer: forget it, so that later
        # tests' SDK spans are no-ops again (else they record and log, e.g. "Processor is already shutdown").
        import acp.telemetry

        if hasattr(acp.telemetry.TRACER, "_real_tracer"):
            acp.telemetry.TRACER._real_tracer = None


@pytest.fixture
def sdk_spans(global_exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    global_exporter.clear()
    return global_exporter


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
    server = one(exporter.get_finished_spans(), "initialize", SpanKind.SERVER)
    # the kept SDK span now nests under our SERVER span instead of floating alone
    assert sdk_span.parent.span_id == server.get_span_context().span_id


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_instrument_before_acp_is_imported() -> None:
    result = _run(
        """
        import sys
        from acp_otel import AcpInstrumentor
        AcpInstrumentor().instrument()
        assert "acp.connection" not in sys.modules
        import acp
        from acp.connection import Connection
        import wrapt
        print(isinstance(Connection.__dict__["send_request"], wrapt.FunctionWrapper))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


@pytest.mark.parametrize("disabled", ["", "acp"])
def test_opentelemetry_instrument_entry_point(disabled: str) -> None:
    bindir = os.path.dirname(sys.executable)
    code = (
        "import acp.connection, json, wrapt; "
        "print(json.dumps(isinstance(acp.connection.Connection.__dict__['send_request'], wrapt.FunctionWrapper)))"
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
    assert json.loads(result.stdout) is (not disabled)


def test_invalid_options_warn_and_use_defaults(caplog: Any) -> None:
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(capture_content="maybe", capture_content_max_length=-3, notification_spans="loud")
    try:
        settings = instrumentor.settings
        assert settings is not None
        assert settings.capture_content is False
        assert settings.capture_content_max_length == 1024
        assert settings.notification_spans == "turn"
    finally:
        instrumentor.uninstrument()
    assert sum("invalid value" in r.getMessage() or "must be" in r.getMessage() for r in caplog.records) == 3
