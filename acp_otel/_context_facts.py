"""The per-direction context caches: what the engine knows of the current context, kept only for speed.

Each message asks three things of the current context: whether instrumentation is enabled in it
(``is_instrumentation_enabled``), its span and whether that span is valid. A ``Context`` is immutable, so the
answers hold for as long as the same object is current: the receive loop's for every incoming message, one
handler's for every message it sends. :class:`DirectionFacts` keeps the last answers per direction; the engine
compares the current context with the one they were read from (``is``) and asks again only when it changed.
A request handler's context, which the engine builds from the sender's (spans and baggage only, see
``Engine.begin_incoming``), is primed as the outgoing facts: the handler's first message skips the lookups too.

Measured (the engine driven alone: a client and an agent engine, one prompt turn with K chunks each way,
sampled, ``notification_spans=turn``; cachegrind, Python 3.11, OpenTelemetry 1.45.2), instructions per turn
with all caches on: 621k at K = 1, 1410k at K = 20. Without the per-direction facts (asked on every message):
+27k at K = 1, +435k at K = 20 (about 10k per message; the whole round trip in ``benchmarks/roundtrip.py`` is
1.6M and 9.1M instructions). Without priming the handler's context: +6.7k at K = 1, +5.6k at K = 20 (one
lookup per request handled).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from ._otel_private import instrumentation_enabled as is_instrumentation_enabled


class ContextFacts:
    """What the engine needs to know of one current context (see the module's docstring)."""

    __slots__ = ("context", "enabled", "span", "traced")

    def __init__(self, context: Context | None, span: Span | None = None) -> None:
        self.context = context
        if context is None:  # the empty placeholder before the first message
            self.enabled = False
            self.span: Span | None = None
            self.traced = False
            return
        if span is not None:  # a handler's context the engine built: see Engine.begin_incoming
            self.enabled = True
        else:
            self.enabled = is_instrumentation_enabled()  # reads the current context, which ``context`` is
            span = trace.get_current_span(context)
        self.span = span
        self.traced = span.get_span_context().is_valid


NO_FACTS = ContextFacts(None)


class DirectionFacts:
    """The last :class:`ContextFacts` seen by each direction (read and replaced inline by the engine)."""

    __slots__ = ("incoming", "outgoing")

    def __init__(self) -> None:
        self.outgoing = NO_FACTS  # the context a message was last sent from
        self.incoming = NO_FACTS  # the context a message was last received in (the receive loop's)

    def clear(self) -> None:
        self.outgoing = self.incoming = NO_FACTS
