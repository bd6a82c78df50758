"""A fast path for the default W3C propagators (trace-context then baggage), exact by construction.

``propagate.inject`` / ``propagate.extract`` through the default composite cost tens of thousands of
instructions per message (getter/setter indirection, a regex search, per-propagator dispatch), a large
share of our overhead per message. When the global propagator is exactly the default composite of
``TraceContextTextMapPropagator`` and ``W3CBaggagePropagator`` (unsubclassed, unpatched), this module
produces the same headers and contexts directly:

* inject writes ``traceparent`` / ``tracestate`` itself (the same formatting as the SDK's propagator,
  with the span context's own ``to_header()``) and hands baggage, when the context holds any, to the real
  baggage propagator;
* extract handles only the canonical ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``, lower-case hex in
  every field as the SDK's propagator requires field by field, non-zero ids, no ``tracestate``; baggage again
  goes to the real propagator) and declines everything else (``None``), so that malformed, hostile or
  unusual headers (an upper-case letter in any one field among them) always take the real propagators' path.

Any other propagator (``OTEL_PROPAGATORS=b3``, a custom one, a subclass, a patched method) gets no fast
path; the check is repeated whenever the global propagator object changes. What tells the default propagators,
and the context keys contexts are built with, are private OpenTelemetry details: they live in
:mod:`acp_otel._otel_private` (without them, no fast path). Written here rather than
taken from a library because no library offers a cheaper equivalent of the SDK's own propagators.
"""

from __future__ import annotations

import re
from typing import Any, TypeGuard

from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context, get_current
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
)

from . import _otel_private as otel_private

__all__ = ["W3CFastPath", "for_propagator"]

# Version 00 exactly, nothing before or after (the SDK's pattern also allows blanks and later versions); lower-case
# hex only in each field, as the SDK's pattern (no IGNORECASE): "00-<UPPER>-<lower>-01" is invalid there too.
_CANONICAL_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16
_FLAGS = {f"{i:02x}": TraceFlags(i) for i in range(256)}
# The keys a Context holds its span and its baggage under (see _otel_private; module constants here, read per
# message). Reading baggage by its key is one dict lookup where baggage.get_all() is four Python calls; a context
# built with the span key directly is half the cost of set_span_in_context (which copies through set_value).
_SPAN_KEY = otel_private.SPAN_KEY
_BAGGAGE_KEY = otel_private.BAGGAGE_KEY


_HEX_BYTE = {i: f"{i:02x}" for i in range(256)}  # trace flags as the SDK writes them (a dict: no negative index)


def _traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The SDK's ``traceparent`` (``format(id, "032x")``, ``"016x"``, flags ``"02x"``). Fixed-width bytes to
    hex costs a quarter less than formatting the ints; ids or flags out of range (no SDK span has them) format
    as the SDK formats them."""
    try:
        return f"00-{trace_id.to_bytes(16, 'big').hex()}-{span_id.to_bytes(8, 'big').hex()}-{_HEX_BYTE[flags]}"
    except (OverflowError, KeyError, TypeError, AttributeError):
        return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


# Classes seen to be Spans: isinstance() against the Span ABC is slow and its answer cannot change.
_span_types: set[type] = set()


def _is_span(obj: object) -> TypeGuard[Span]:
    if isinstance(obj, Span):
        _span_types.add(type(obj))
        return True
    return False


class W3CFastPath:
    """Inject and extract for one default composite whose baggage propagator is ``baggage_propagator``."""

    __slots__ = ("_baggage", "_last_carrier", "_last_extracted", "_last_injected")

    def __init__(self, baggage_propagator: W3CBaggagePropagator) -> None:
        self._baggage = baggage_propagator
        # The last header each way and what it stands for: the chunks of a turn all carry the context of
        # the same handler, so consecutive messages repeat them. Both are immutable (a Context refuses
        # writes, a SpanContext is a tuple); one tuple is swapped in whole, so threads see a consistent pair.
        self._last_extracted: tuple[str, Context] | None = None
        self._last_injected: tuple[SpanContext, str, str | None] | None = None
        # The last (context, span) injected and its headers: both are immutable, so the same pair gives
        # the same headers (a handler streaming chunks sends them all from one context).
        self._last_carrier: tuple[Context | None, Any, dict[str, str]] | None = None

    def inject(self, context: Context | None, span: Any = None) -> dict[str, str]:
        """The headers ``propagate.inject`` writes for ``context`` (the current context when ``None``), with
        ``span`` in place of the context's span when given."""
        if context is None:
            context = get_current()
        last_carrier = self._last_carrier
        if last_carrier is not None and last_carrier[0] is context and last_carrier[1] is span:
            return dict(last_carrier[2])
        given = span
        carrier: dict[str, str] = {}
        if span is None:
            span = trace.get_current_span(context)
        if type(span) in _span_types or _is_span(span):
            span_context = span.get_span_context()
            last = self._last_injected
            if last is None or last[0] is not span_context:
                last = None
                if span_context != INVALID_SPAN_CONTEXT:
                    traceparent = _traceparent(span_context.trace_id, span_context.span_id, span_context.trace_flags)
                    trace_state = span_context.trace_state
                    # The shared empty default (most span contexts) is known to give no header.
                    tracestate = (
                        trace_state.to_header() if trace_state is not DEFAULT_TRACE_STATE and trace_state else None
                    )
                    last = self._last_injected = (span_context, traceparent, tracestate)
            if last is not None:
                carrier["traceparent"] = last[1]
                if last[2] is not None:
                    carrier["tracestate"] = last[2]
        entries = context.get(_BAGGAGE_KEY)  # what baggage.get_all(context) reads
        if isinstance(entries, dict) and entries:  # rare: the real propagator's encoding and limits
            self._baggage.inject(carrier, context)
        self._last_carrier = (context, given, dict(carrier))
        return carrier

    def extract(self, carrier: dict[str, Any]) -> Context | None:
        """The context ``propagate.extract(carrier, Context())`` gives, or ``None`` to use the real one."""
        traceparent = carrier.get("traceparent")
        if traceparent is None:
            return None
        if type(traceparent) is not str or "tracestate" in carrier:
            return None
        last = self._last_extracted
        if last is not None and last[0] == traceparent:
            context = last[1]
            if "baggage" in carrier:
                context = self._baggage.extract(carrier, context)
            return context
        match = _CANONICAL_TRACEPARENT.fullmatch(traceparent)
        if match is None:
            return None
        trace_id, span_id, flags = match.groups()
        if trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
            return None
        span_context = SpanContext(int(trace_id, 16), int(span_id, 16), True, _FLAGS[flags])
        context = Context({_SPAN_KEY: NonRecordingSpan(span_context)})  # set_span_in_context(span, Context())
        self._last_extracted = (traceparent, context)
        if "baggage" in carrier:
            context = self._baggage.extract(carrier, context)
        return context


_checked: Any = None  # the global propagator the answer below is for
_answer: W3CFastPath | None = None


def for_propagator(textmap: Any) -> W3CFastPath | None:
    """The fast path when ``textmap`` is exactly the default W3C composite, else ``None``."""
    global _checked, _answer
    if textmap is not _checked:
        try:
            _answer = _examine(textmap)
        except Exception:  # an odd custom propagator: no fast path
            _answer = None
        _checked = textmap
    return _answer


def _examine(textmap: Any) -> W3CFastPath | None:
    if not otel_private.DIRECT_CONTEXTS:  # contexts cannot be built by key: the real propagators only
        return None
    baggage_propagator = otel_private.default_w3c_baggage(textmap)
    return W3CFastPath(baggage_propagator) if baggage_propagator is not None else None
