"""Every reliance on OpenTelemetry behaviour that is not public API, fenced in one place.

Each may change in any OpenTelemetry release. Each has a reason (why the public API is not enough), a
fallback (the public API, or a degraded behaviour said here) for when the assumption does not hold, and a
test in ``tests/test_otel_private.py`` that fails loudly when a release breaks it:

* **Context keys** (:data:`SPAN_KEY`, :data:`BAGGAGE_KEY`, :data:`DIRECT_CONTEXTS`): a context is built as
  ``Context({SPAN_KEY: span, ...})`` and baggage read as ``context.get(BAGGAGE_KEY)``, half the cost of the
  API's copies. Found through the API at import; when ``set_span_in_context`` / ``set_baggage`` stop
  writing exactly one key, :data:`DIRECT_CONTEXTS` is ``False``: the W3C fast path is off (the real
  propagators run) and :func:`context_with` builds contexts through the API.
* **The default W3C propagators** (:func:`default_w3c_baggage`): the fast path stands in for them only when
  the global propagator is exactly their unpatched composite, told by their classes, methods, header names
  and the composite's ``_propagators``. Anything else (or a change of those): no fast path.
* **The API's proxy instruments** (:func:`recording_check`): before a meter provider is set, the API hands out
  proxy instruments that drop records; whether one has a real instrument behind it is only visible in its
  ``_real_instrument``. Without that attribute: always record (the proxy drops them: correct, slower).
* **The SDK's way down to its exporters** (:data:`SDK_EXPORTER_PATHS`): console exporters are found under
  the providers through private attributes. When a path is renamed, an exporter under it is not found and
  keeps writing where it was configured to (the stdout guard does nothing for it).
* **The logs API** (:func:`logger_provider`) is still ``opentelemetry._logs``; without it, no logger
  provider is looked at.
* **Exporter entry points** (:func:`entry_points`): ``opentelemetry.util._importlib_metadata``, what the SDK's
  own configurator uses; without it, :func:`importlib.metadata.entry_points`.
* **The suppression keys** (:func:`instrumentation_enabled`): what ``opentelemetry-instrumentation``'s
  ``is_instrumentation_enabled`` reads (the API's ``_SUPPRESS_INSTRUMENTATION_KEY`` and the plain
  ``"suppress_instrumentation"`` key), read here because importing that module imports wrapt and more (some
  40 ms on every ``acp-otel proxy`` start). Without the API's key: that function itself.
* **The propagators' loggers** (:data:`PROPAGATOR_LOGGERS`): the W3C propagators warn about a peer's
  malformed headers through loggers named after their modules. A renamed one is not filtered (its warnings
  reach the application's log).

Names read per message are module constants here (imported once by their users), never calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# ------------------------------------------------------------------ context keys


def _probe_context_keys() -> tuple[str, str, bool]:
    """``(span key, baggage key, whether contexts may be built by key)``, found through the public API."""
    try:
        span_key = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))
        baggage_key = next(iter(baggage.set_baggage("k", "v", Context())))
    except Exception:
        return "", "", False
    span = NonRecordingSpan(SpanContext(1, 1, True))
    parent = Context({"acp_otel.probe": 1})
    in_span = trace.set_span_in_context(span, parent)
    with_baggage = baggage.set_baggage("k", "v", Context())
    entries = with_baggage.get(baggage_key)  # the fast path reads a dict there (what baggage.get_all reads)
    exact = (
        dict(in_span) == {"acp_otel.probe": 1, span_key: span}
        and trace.get_current_span(Context({span_key: span})) is span
        and list(with_baggage) == [baggage_key]
        and isinstance(entries, dict)
        and entries == {"k": "v"}
        and baggage.get_all(Context({baggage_key: {"k": "v"}})) == {"k": "v"}
    )
    return span_key, baggage_key, exact


SPAN_KEY, BAGGAGE_KEY, DIRECT_CONTEXTS = _probe_context_keys()
"""The key a ``Context`` holds its span under (what ``set_span_in_context`` writes), the key of its baggage,
and whether a context built as ``Context({**parent, SPAN_KEY: span})`` is exactly what
``set_span_in_context(span, parent)`` gives (``False``: build contexts with :func:`context_with`)."""


def context_with(parent: Context, span: Span, key: str, value: object) -> Context:
    """``Context({**parent, SPAN_KEY: span, key: value})`` through the public API (the fallback when
    :data:`DIRECT_CONTEXTS` is ``False``)."""
    return otel_context.set_value(key, value, trace.set_span_in_context(span, parent))


# ------------------------------------------------------------------ the default W3C propagators

# What makes the propagators "the default ones": their classes' own methods, as the API ships them.
DEFAULT_W3C_METHODS: dict[type, tuple[Any, Any]] = {
    TraceContextTextMapPropagator: (TraceContextTextMapPropagator.inject, TraceContextTextMapPropagator.extract),
    W3CBaggagePropagator: (W3CBaggagePropagator.inject, W3CBaggagePropagator.extract),
}
DEFAULT_COMPOSITE_METHODS = (CompositePropagator.inject, CompositePropagator.extract)
W3C_HEADER_NAMES = ("traceparent", "tracestate", "baggage")


def _header_names() -> tuple[str, str, str]:
    return (
        TraceContextTextMapPropagator._TRACEPARENT_HEADER_NAME,
        TraceContextTextMapPropagator._TRACESTATE_HEADER_NAME,
        W3CBaggagePropagator._BAGGAGE_HEADER_NAME,
    )


def default_w3c_baggage(textmap: Any) -> W3CBaggagePropagator | None:
    """The baggage propagator of ``textmap`` when ``textmap`` is exactly the API's default composite
    (``TraceContextTextMapPropagator`` then ``W3CBaggagePropagator``, unsubclassed, unpatched, on the W3C header
    names), else ``None``. Called when the global propagator object changes, not per message."""
    if type(textmap) is not CompositePropagator or vars(textmap).keys() != {"_propagators"}:
        return None
    if _header_names() != W3C_HEADER_NAMES:
        return None
    if (CompositePropagator.inject, CompositePropagator.extract) != DEFAULT_COMPOSITE_METHODS:
        return None
    propagators = list(textmap._propagators)
    if [type(p) for p in propagators] != [TraceContextTextMapPropagator, W3CBaggagePropagator]:
        return None
    for p in propagators:
        # No instance attribute (a patched method or header name) and the classes' methods unpatched.
        if vars(p) or (type(p).inject, type(p).extract) != DEFAULT_W3C_METHODS[type(p)]:
            return None
    return cast(W3CBaggagePropagator, propagators[1])


# ------------------------------------------------------------------ suppression

SUPPRESS_PLAIN_KEY = "suppress_instrumentation"  # opentelemetry-instrumentation's, "for backward compatibility"


def _instrumentation_enabled_check() -> Callable[[], bool]:
    try:
        from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as key
    except ImportError:
        from opentelemetry.instrumentation.utils import is_instrumentation_enabled

        return is_instrumentation_enabled
    get_value = otel_context.get_value

    def enabled() -> bool:
        return not (get_value(key) or get_value(SUPPRESS_PLAIN_KEY))

    return enabled


instrumentation_enabled = _instrumentation_enabled_check()
"""``opentelemetry.instrumentation.utils.is_instrumentation_enabled`` (same keys, same answer) without its imports."""


# ------------------------------------------------------------------ the API's proxy instruments

_MISSING = object()


def _always() -> bool:
    return True


def recording_check(instrument: Any) -> Callable[[], bool]:
    """A function that says whether a record on ``instrument`` (and on every instrument of its meter) would be
    kept: ``False`` while it is one of the API's proxy instruments with no meter provider set behind it (every
    proxy gets its real instrument at once when one is set). Always ``True`` for other instruments, and for a
    proxy without ``_real_instrument`` (the API has no public "enabled" yet)."""
    if getattr(instrument, "_real_instrument", _MISSING) is _MISSING:
        return _always

    def has_real_instrument() -> bool:
        return instrument._real_instrument is not None

    return has_real_instrument


# ------------------------------------------------------------------ the SDK's way down to its exporters

SDK_EXPORTER_PATHS = (
    "_active_span_processor",  # TracerProvider -> SynchronousMultiSpanProcessor
    "_span_processors",  # -> (processors, ...)
    "span_exporter",  # SimpleSpanProcessor, BatchSpanProcessor (older)
    "_batch_processor",  # BatchSpanProcessor / BatchLogRecordProcessor (newer) -> BatchProcessor
    "_exporter",  # BatchProcessor, PeriodicExportingMetricReader, SimpleLogRecordProcessor
    "_metric_readers",  # MeterProvider (1.4x) -> [readers]
    "_sdk_config",  # MeterProvider (older) -> SdkConfiguration
    "metric_readers",  # -> (readers, ...)
    "_multi_log_record_processor",  # LoggerProvider
    "_log_record_processors",
)
"""Attribute names followed from a tracer, meter or logger provider down to its exporters (SDK 1.2x - 1.4x)."""


def logger_provider() -> Any:
    """The global logger provider (``opentelemetry._logs``, the logs API's module), or ``None`` without it."""
    try:
        from opentelemetry import _logs

        return _logs.get_logger_provider()
    except (ImportError, AttributeError):
        return None


def entry_points(group: str, name: str) -> Iterable[Any]:
    """The installed entry points of ``group`` called ``name``, found as the OpenTelemetry SDK finds them."""
    try:
        from opentelemetry.util._importlib_metadata import entry_points as otel_entry_points
    except ImportError:
        from importlib.metadata import entry_points as stdlib_entry_points

        return stdlib_entry_points(group=group, name=name)
    return cast(Iterable[Any], otel_entry_points(group=group, name=name))


# ------------------------------------------------------------------ the propagators' loggers

PROPAGATOR_LOGGERS = (
    "opentelemetry.trace.propagation.tracecontext",
    "opentelemetry.trace.span",
    "opentelemetry.baggage.propagation",
    "opentelemetry.propagators.composite",
)
"""The loggers the W3C propagators warn through about malformed headers (the modules' ``__name__``)."""
