"""Spans and metric records made before the OpenTelemetry SDK is set up, recorded once it is.

The proxy relays the editor's first messages while its telemetry is still being set up (importing and
configuring the SDK and the exporters takes a good part of a second on a busy machine). The engine runs from
the start with a :class:`DeferredTracer` and instruments from a :class:`DeferredMeterProvider`:

* a span started before the SDK is ready gets its trace context at once, as the SDK would make it: the
  parent's trace id or a random one, a random span id, the sampling decision of the configured built-in
  sampler (:func:`early_sampler`), the parent's trace state. That context is what the forwarded message
  carries. Everything done to the span (attributes, events, status, end) is kept with its time;
* :meth:`DeferredTracer.attach` then starts each such span in the SDK with its own ids (the ids
  generator given to the provider hands them out, :class:`acp_otel._proxy.telemetry.ReplayIds`), its real
  start time, and replays what was done to it; from then on the span and the tracer delegate to the SDK's;
* a metric record made before the meter provider exists is kept and recorded once it does.

Only the API is imported here. Callers serialise every call (the proxy's message tracer holds one lock for
the engine and for :meth:`DeferredTracer.attach`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from .early import sampler_decision

_log = logging.getLogger("acp_otel")

# The W3C level-2 "random trace id" flag: APIs that know it come with SDKs that set it (see _flags).
_RANDOM_FLAG = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))

# A sampling decision from a parent span context (None: a root) and the trace id.
Decide = Callable[[SpanContext | None, int], bool]


def early_sampler(environ: Mapping[str, str] | None = None) -> Decide | None:
    """The decision of the SDK's sampler for ``OTEL_TRACES_SAMPLER`` (:func:`.early.sampler_decision`), or
    ``None`` for a sampler that is not reproduced (an unknown name or a plug-in: spans then wait for the SDK)."""
    decision = sampler_decision(environ)
    if decision is None:
        return None

    def decide(parent: SpanContext | None, trace_id: int) -> bool:
        return decision(bool(parent.trace_flags.sampled) if parent is not None else None, trace_id)

    return decide


def _random_id(bits: int) -> int:
    # As the SDK's RandomIdGenerator: never the invalid 0.
    while True:
        value = random.getrandbits(bits)
        if value:
            return value


def _flags(sampled: bool, parent: SpanContext | None) -> TraceFlags:
    flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
    if _RANDOM_FLAG:  # the SDK's random ids are random; a child keeps what its parent says
        flags |= _RANDOM_FLAG if parent is None else (int(parent.trace_flags) & _RANDOM_FLAG)
    return TraceFlags(flags)


class DeferredSpan(trace.Span):
    """A sampled span started before the SDK was ready: its context now, the SDK's span once attached."""

    def __init__(
        self,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: Mapping[str, Any] | None,
        links: Sequence[Link] | None,
        start_time: int,
        span_context: SpanContext,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.name = name
        self.parent = context
        self.kind = kind
        self.attributes = dict(attributes) if attributes else None
        self.links = list(links) if links else None
        self.start_time = start_time
        self._context = span_context
        self._ops: list[tuple[str, tuple[Any, ...]]] = []
        self._ended = False
        self._clock = clock  # the time of what is done to the span (its tracer's, see DeferredTracer.clock)
        self.real: trace.Span | None = None

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        real = self.real
        return real.is_recording() if real is not None else not self._ended

    def _do(self, op: str, *args: Any) -> None:
        real = self.real
        if real is not None:
            getattr(real, op)(*args)
        else:
            self._ops.append((op, args))

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._do("set_attributes", dict(attributes))

    def set_attribute(self, key: str, value: Any) -> None:
        self._do("set_attribute", key, value)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        self._do("add_event", name, attributes, timestamp if timestamp is not None else self._clock())

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        self._do("add_link", context, attributes)

    def update_name(self, name: str) -> None:
        self._do("update_name", name)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self._do("set_status", status, description)

    def record_exception(
        self, exception: BaseException, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        self._do("record_exception", exception, attributes, timestamp or self._clock(), escaped)

    def end(self, end_time: int | None = None) -> None:
        if self.real is None:
            self._ended = True
        self._do("end", end_time if end_time is not None else self._clock())

    def attach(self, real: trace.Span) -> None:
        """Replay what was done to this span on ``real`` (the SDK's span with the same context), then delegate."""
        ops, self._ops = self._ops, []
        for op, args in ops:
            try:
                getattr(real, op)(*args)
            except Exception:
                _log.debug("acp_otel proxy: could not replay %s on an early span", op, exc_info=True)
        self.real = real


class DeferredTracer(trace.Tracer):
    """The engine's tracer: early spans (see the module) until :meth:`attach`, then the SDK's tracer."""

    def __init__(self, decide: Decide, on_many: Callable[[], None] | None = None, many: int = 0) -> None:
        """``on_many`` is called when ``many`` early spans are waiting for :meth:`attach`."""
        self._decide = decide
        self._on_many = on_many
        self._many = many
        self._real: trace.Tracer | None = None
        self._early: list[DeferredSpan] = []
        self._detached = False
        self._forced: tuple[int, int] | None = None
        # Called with each early span (recording) and its attributes as it starts (the SDK's spans: its processors).
        self.on_early_start: Callable[[trace.Span, Any], None] | None = None
        # The time of what is done to early spans; the proxy sets it while it traces lines relayed before the
        # engine existed (acp_otel._proxy.early) at the times they were relayed.
        self.clock: Callable[[], int] = time.time_ns

    def _now(self) -> int:
        return self.clock()  # read when called: the clock the tracer has then

    def force_ids(self, trace_id: int, span_id: int) -> None:
        """The next span takes these ids (the trace id only when it is a root): those an early line was
        forwarded with (:mod:`.early`)."""
        self._forced = (trace_id, span_id)

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        real = self._real
        if real is not None:
            return real.start_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
            )
        if self._detached:  # the SDK could not be set up: nothing is recorded
            return trace.INVALID_SPAN
        forced, self._forced = self._forced, None
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
        trace_id = parent.trace_id if parent is not None else forced[0] if forced else _random_id(128)
        sampled = self._decide(parent, trace_id)
        state = parent.trace_state if parent is not None else TraceState()
        span_id = forced[1] if forced else _random_id(64)
        span_context = SpanContext(trace_id, span_id, False, _flags(sampled, parent), state)
        if not sampled:
            return NonRecordingSpan(span_context)
        span = DeferredSpan(name, context, kind, attributes, links, start_time or self.clock(), span_context, self._now)
        self._early.append(span)
        if self.on_early_start is not None:
            self.on_early_start(span, attributes)
        if len(self._early) == self._many and self._on_many is not None:
            self._on_many()
        return span

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Iterator[trace.Span]:  # type: ignore[override]
        raise NotImplementedError("the proxy's engine starts spans with start_span only")

    def attach(self, real: trace.Tracer | None, force_ids: Callable[[int | None, int | None], None]) -> int:
        """Start every early span in ``real`` with its ids and start time (``force_ids(trace_id, span_id)``
        makes the SDK's next span take them; ``(None, None)`` releases), replay it, and delegate from now on.

        ``real`` ``None``: the SDK could not be set up; early spans are dropped. Returns how many early spans
        were recorded."""
        early, self._early = self._early, []
        if real is None:
            self._detached = True
            return 0
        recorded = 0
        for span in early:
            wanted = span.get_span_context()
            root = not trace.get_current_span(span.parent).get_span_context().is_valid
            force_ids(wanted.trace_id if root else None, wanted.span_id)
            try:
                sdk_span = real.start_span(
                    span.name, span.parent, span.kind, span.attributes, span.links, span.start_time
                )
            except Exception:
                _log.debug("acp_otel proxy: could not record an early span", exc_info=True)
                continue
            finally:
                force_ids(None, None)
            got = sdk_span.get_span_context()
            if (got.trace_id, got.span_id, got.trace_flags) != (wanted.trace_id, wanted.span_id, wanted.trace_flags):
                _log.debug("acp_otel proxy: early span %r recorded as %s, forwarded as %s", span.name, got, wanted)
            span.attach(sdk_span)
            recorded += 1
        self._real = real
        return recorded


# ------------------------------------------------------------------------------------------ metrics


class DeferredInstrument:
    """A histogram or counter whose records are kept until the real instrument exists."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._records: list[tuple[str, Any, Any]] | None = []
        self._real: Any = None

    def record(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        self._keep("record", amount, attributes)

    def add(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        self._keep("add", amount, attributes)

    def _keep(self, op: str, amount: Any, attributes: Any) -> None:
        real = self._real
        if real is not None:
            getattr(real, op)(amount, attributes)
        elif self._records is not None and len(self._records) < 10_000:
            self._records.append((op, amount, attributes))

    def attach(self, real: Any) -> None:
        """Record what was kept on ``real`` and delegate from now on (``None``: drop, and record nothing)."""
        records, self._records = self._records or [], None
        if real is None:
            return
        for op, amount, attributes in records:
            try:
                getattr(real, op)(amount, attributes)
            except Exception:
                _log.debug("acp_otel proxy: could not replay a metric record", exc_info=True)
        self._real = real


class _DeferredMeter(metrics.NoOpMeter):
    def create_histogram(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return DeferredInstrument(name)

    def create_counter(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return DeferredInstrument(name)


class DeferredMeterProvider(metrics.MeterProvider):
    """Gives meters whose histograms and counters are :class:`DeferredInstrument` (others are no-ops)."""

    def get_meter(self, name: str, *args: Any, **kwargs: Any) -> metrics.Meter:
        return _DeferredMeter(name)


def attach_instruments(deferred: Any, real: Any) -> None:
    """Attach each :class:`DeferredInstrument` attribute of ``deferred`` (engine ``Instruments`` made from a
    :class:`DeferredMeterProvider`) to the same attribute of ``real`` (made from the SDK's; ``None``: drop)."""
    for attribute, value in vars(deferred).items():
        if isinstance(value, DeferredInstrument):
            value.attach(getattr(real, attribute, None) if real is not None else None)
