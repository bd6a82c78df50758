"""The private OpenTelemetry behaviour ``acp_otel/_otel_private.py`` relies on still holds, and its fallbacks work.

Each assumption test fails loudly (with what broke and what it costs) when an OpenTelemetry release changes
the behaviour; without it, acp-otel would run its fallback (slower, or a documented degraded behaviour).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from acp_otel import _metrics, _stdout_guard, _w3c_fast
from acp_otel import _otel_private as otel_private


def _run(code: str) -> None:
    """Run ``code`` in a fresh interpreter (the API's globals as a new process has them); fail with its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------ context keys


def test_set_span_in_context_writes_exactly_the_span_key() -> None:
    span_key, baggage_key, direct = otel_private._probe_context_keys()
    assert direct, (
        "set_span_in_context / set_baggage no longer write exactly one key each: the W3C fast path is off "
        "(every message takes the real propagators) and contexts must be built with context_with()"
    )
    assert (span_key, baggage_key, direct) == (otel_private.SPAN_KEY, otel_private.BAGGAGE_KEY, True)
    span = NonRecordingSpan(SpanContext(0xA, 0xB, True))
    assert trace.set_span_in_context(span, Context()) == Context({otel_private.SPAN_KEY: span})
    parent = baggage.set_baggage("k", "v", Context({"other": 1}))
    built = Context({**parent, otel_private.SPAN_KEY: span, "call": 2})
    assert built == otel_private.context_with(parent, span, "call", 2)
    assert trace.get_current_span(built) is span and baggage.get_all(built) == {"k": "v"}


def test_a_context_api_that_writes_more_turns_the_fast_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    real = trace.set_span_in_context

    def two_keys(span: Any, context: Any = None) -> Context:
        return Context({**real(span, context), "another": 1})

    monkeypatch.setattr(trace, "set_span_in_context", two_keys)
    assert otel_private._probe_context_keys()[2] is False
    monkeypatch.setattr(otel_private, "DIRECT_CONTEXTS", False)
    assert _w3c_fast._examine(CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])) is None


# ------------------------------------------------------------------ the default W3C propagators


def test_the_default_propagator_is_recognised() -> None:
    assert otel_private._header_names() == otel_private.W3C_HEADER_NAMES, "the W3C propagators' header names moved"
    # What opentelemetry.propagate builds in a new process with no OTEL_PROPAGATORS: the fast path must take it.
    _run(
        """
        from opentelemetry import propagate
        from acp_otel import _otel_private, _w3c_fast
        textmap = propagate.get_global_textmap()
        assert _otel_private.default_w3c_baggage(textmap) is not None, (
            f"the default propagator {textmap!r} ({vars(textmap)}) is no longer recognised: no W3C fast path"
        )
        assert _w3c_fast.for_propagator(textmap) is not None
        """
    )
    composite = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    assert otel_private.default_w3c_baggage(composite) is composite._propagators[1]


def test_other_propagators_are_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    class Subclass(TraceContextTextMapPropagator):
        pass

    assert otel_private.default_w3c_baggage(CompositePropagator([Subclass(), W3CBaggagePropagator()])) is None
    assert otel_private.default_w3c_baggage(CompositePropagator([TraceContextTextMapPropagator()])) is None
    assert otel_private.default_w3c_baggage(TraceContextTextMapPropagator()) is None
    patched = TraceContextTextMapPropagator()
    patched.inject = lambda *a, **k: None  # type: ignore[method-assign]
    assert otel_private.default_w3c_baggage(CompositePropagator([patched, W3CBaggagePropagator()])) is None
    monkeypatch.setattr(W3CBaggagePropagator, "extract", lambda *a, **k: None)
    assert (
        otel_private.default_w3c_baggage(CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()]))
        is None
    )


# ------------------------------------------------------------------ the API's proxy instruments


def test_the_apis_proxy_instruments_tell_when_a_provider_is_set() -> None:
    # The global meter provider can be set once per process: a new one.
    _run(
        """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from acp_otel import _otel_private
        from acp_otel._metrics import make_instruments

        instruments = make_instruments(None, "0")
        proxy = instruments.turn_duration
        assert getattr(proxy, "_real_instrument", "missing") is None, (
            f"the API's proxy instrument {type(proxy)} has no _real_instrument None before a provider is set: "
            "recording() is always True (records go to the proxy, which drops them: slower)"
        )
        assert instruments.recording() is False
        metrics.set_meter_provider(MeterProvider())
        assert proxy._real_instrument is not None, "the proxy's _real_instrument did not change with the provider"
        assert instruments.recording() is True
        """
    )


def test_other_instruments_always_record() -> None:
    instruments = _metrics.make_instruments(MeterProvider(), "0")
    assert instruments is not None and instruments.recording() is True
    assert otel_private.recording_check(object())() is True  # no _real_instrument: the fallback records


def test_a_failure_to_make_instruments_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MeterProvider):
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("broken provider")

    with caplog.at_level(logging.DEBUG, logger="acp_otel"):
        assert _metrics.make_instruments(Broken(), "0") is None
    [record] = [r for r in caplog.records if "metric instruments" in r.getMessage()]
    assert record.name == "acp_otel" and record.exc_info is not None


# ------------------------------------------------------------------ the SDK's way down to its exporters


def test_the_sdk_exporter_paths_reach_every_console_exporter() -> None:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogExporter, SimpleLogRecordProcessor

    span_exporters = [ConsoleSpanExporter(), ConsoleSpanExporter()]
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporters[0]))
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporters[1]))
    metric_exporter = ConsoleMetricExporter()
    meter_provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)]
    )
    log_exporters = [ConsoleLogExporter(), ConsoleLogExporter()]
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporters[0]))
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporters[1]))
    try:
        for provider, exporters in (
            (tracer_provider, span_exporters),
            (meter_provider, [metric_exporter]),
            (logger_provider, log_exporters),
        ):
            found = _stdout_guard.console_exporters(provider)
            assert {id(e) for e in found} == {id(e) for e in exporters}, (
                f"SDK_EXPORTER_PATHS no longer lead from {type(provider).__name__} to its console exporters: "
                "they would write to a stdio agent's stdout"
            )
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        logger_provider.shutdown()


def test_the_logs_api_is_found() -> None:
    from opentelemetry import _logs

    assert otel_private.logger_provider() is _logs.get_logger_provider()


# ------------------------------------------------------------------ exporter entry points


def test_entry_points_are_found_with_and_without_the_sdks_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    import opentelemetry.util._importlib_metadata  # noqa: F401  (the module the fence uses first)

    def names() -> list[str]:
        return [ep.value for ep in otel_private.entry_points("opentelemetry_traces_exporter", "console")]

    assert names() == ["opentelemetry.sdk.trace.export:ConsoleSpanExporter"]
    monkeypatch.setitem(sys.modules, "opentelemetry.util._importlib_metadata", None)  # import fails
    assert names() == ["opentelemetry.sdk.trace.export:ConsoleSpanExporter"]


# ------------------------------------------------------------------ the propagators' loggers


def test_the_propagators_warn_through_the_loggers_we_filter(caplog: pytest.LogCaptureFixture) -> None:
    composite = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    with caplog.at_level(logging.WARNING):
        for carrier in (
            {"traceparent": traceparent, "tracestate": "bad key=1"},
            {"baggage": "k=" + "v" * 9000},
            {"baggage": "bad entry;;"},
        ):
            caplog.clear()
            composite.extract(carrier)
            names = {r.name for r in caplog.records}
            assert names and names <= set(otel_private.PROPAGATOR_LOGGERS), (
                f"{carrier}: the propagators warned through {names}, not the loggers whose records we filter "
                "(a peer's bad headers would reach the application's log)"
            )


async def test_the_engine_builds_handler_contexts_through_the_api_when_it_must(
    monkeypatch: pytest.MonkeyPatch, instrument: Any, exporter: Any, pair: Any
) -> None:
    """With DIRECT_CONTEXTS off, a handler still runs under its SERVER span, with the call that names its failure."""
    from acp.exceptions import RequestError
    from acp_app import open_session, prompt
    from spans import one, parent_of, span_id, wait_until

    from acp_otel import _engine

    built: list[int] = []
    real = otel_private.context_with

    def counting(*args: Any) -> Context:
        built.append(1)
        return real(*args)

    monkeypatch.setattr(_engine, "_DIRECT_CONTEXTS", False)
    monkeypatch.setattr(otel_private, "context_with", counting)
    p = await pair()
    session_id = await open_session(p.client_conn)
    with pytest.raises(RequestError):
        await prompt(p.client_conn, session_id, "fail")
    await prompt(p.client_conn, session_id, "hello")
    await wait_until(lambda: sum(s.name.startswith("session/prompt") for s in exporter.get_finished_spans()) == 4)
    assert built, "the engine did not take the public API's path"
    spans = exporter.get_finished_spans()
    failed, served = sorted(
        (s for s in spans if s.name.startswith("session/prompt") and s.kind is trace.SpanKind.SERVER),
        key=lambda s: s.start_time,
    )
    assert failed.attributes["error.type"] == "ValueError"  # the handler's exception, named through the call key
    read = one(spans, "fs/read_text_file", trace.SpanKind.CLIENT)
    tool = one(spans, "execute_tool read", trace.SpanKind.INTERNAL)
    assert parent_of(tool) == span_id(served) and parent_of(read) == span_id(tool)


def test_instrumentation_enabled_reads_what_the_instrumentations_read() -> None:
    """Same answer as opentelemetry-instrumentation's is_instrumentation_enabled, suppressed or not, either key."""
    from opentelemetry import context
    from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation

    assert otel_private.instrumentation_enabled is not is_instrumentation_enabled  # the API's key was found
    assert otel_private.instrumentation_enabled() is is_instrumentation_enabled() is True
    with suppress_instrumentation():
        assert otel_private.instrumentation_enabled() is is_instrumentation_enabled() is False
    token = context.attach(context.set_value(otel_private.SUPPRESS_PLAIN_KEY, True))
    try:
        assert otel_private.instrumentation_enabled() is is_instrumentation_enabled() is False
    finally:
        context.detach(token)
    assert otel_private.instrumentation_enabled() is True
