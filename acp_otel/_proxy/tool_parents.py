"""The proxy's own spans that serve a tool call the agent's own telemetry reports, moved under the agent's span.

Under ``--agent-telemetry``, once the agent's spans report its tool calls the proxy makes no tool spans (each fact
once), and its ``session/request_permission``, ``fs/*`` and ``terminal/*`` spans would hang from the turn. The
engine marks those that serve a known tool call with ``acp.tool_call.id``; :class:`ToolParents`, between the
proxy's batch processor and its exporter, holds each such span until the joiner has seen the agent's
``execute_tool`` span of that tool call in the turn's trace, and exports it with that span as its parent. A span
whose tool span does not come within :data:`HOLD_S` (or past :data:`MAX_HELD` held, or at exit) is exported as it
was: never lost. Held spans go out from the batch processor's thread or this module's own, never a relay's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext

from .. import _semconv as sc

HOLD_S = 10.0
"""How long a span waits for the agent's tool span (the OTel SDKs' batch processors export every 5 s by default;
the tool span ends after the requests that serve it)."""
MAX_HELD = 1024
"""Spans held at once; past this the oldest goes as it was."""

Lookup = Callable[[int, str], "int | None"]
"""``lookup(trace_id, tool_call_id)``: the span id of the agent's ``execute_tool`` span of that tool call in that
trace, if the joiner has seen it."""


def tool_call_of(span: ReadableSpan) -> str | None:
    """The tool call a proxy span serves without hanging from a tool span of the proxy (the engine's mark)."""
    attributes = span.attributes
    if not attributes or span.parent is None:
        return None
    tool_call_id = attributes.get(sc.ACP_TOOL_CALL_ID)
    if type(tool_call_id) is not str or attributes.get(sc.ACP_METHOD_NAME) == sc.SESSION_UPDATE:
        return None  # an update's own tool call id (update spans stay where they are)
    return tool_call_id


def reparented(span: ReadableSpan, parent_span_id: int) -> ReadableSpan:
    """``span`` with the span ``parent_span_id`` of its own trace (in the agent's process) as its parent."""
    context = span.context
    assert context is not None  # an SDK span always has one
    parent = SpanContext(
        context.trace_id,
        parent_span_id,
        is_remote=True,
        trace_flags=context.trace_flags,
        trace_state=context.trace_state,
    )
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _whole(span: ReadableSpan) -> bool:
    """Nothing was dropped from ``span`` (a copy would not say how much was: such a span goes as it is)."""
    return not any(getattr(span, name, 0) for name in ("dropped_attributes", "dropped_events", "dropped_links"))


class ToolParents(SpanExporter):
    """A span exporter that re-parents the proxy's marked spans under the agent's tool spans (see the module)."""

    def __init__(
        self,
        inner: SpanExporter,
        lookup: Lookup,
        *,
        hold_s: float = HOLD_S,
        max_held: int = MAX_HELD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._lookup = lookup
        self._hold_s = hold_s
        self._max_held = max_held
        self._clock = clock
        self._held: list[tuple[float, ReadableSpan, str]] = []  # (deadline, span, tool call id), oldest first
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()  # one export into ``inner`` at a time (its HTTP session is one)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.moved = 0

    def _parent(self, span: ReadableSpan, tool_call_id: str) -> int | None:
        context = span.context
        if context is None:
            return None
        try:
            return self._lookup(context.trace_id, tool_call_id)
        except Exception:
            return None

    def _sort(self, spans: Sequence[ReadableSpan], everything: bool) -> list[ReadableSpan]:
        """What can go now: the new ``spans`` (marked ones re-parented, or held) and the held ones whose tool span
        came, whose time is up, or past the bound (all of them when ``everything``)."""
        out: list[ReadableSpan] = []
        now = self._clock()
        with self._lock:
            held = self._held
            for span in spans:
                tool_call_id = tool_call_of(span)
                if tool_call_id is None or not _whole(span):
                    out.append(span)
                elif self._stopped:  # after the release: moved if its tool span came, never held
                    parent = self._parent(span, tool_call_id)
                    out.append(reparented(span, parent) if parent is not None else span)
                else:
                    held.append((now + self._hold_s, span, tool_call_id))
            kept: list[tuple[float, ReadableSpan, str]] = []
            for entry in held:
                deadline, span, tool_call_id = entry
                parent = self._parent(span, tool_call_id)
                if parent is not None:
                    out.append(reparented(span, parent))
                    self.moved += 1
                elif everything or deadline <= now:
                    out.append(span)
                else:
                    kept.append(entry)
            while len(kept) > self._max_held:
                out.append(kept.pop(0)[1])
            self._held = kept
            if kept and not everything and self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._loop, name="acp-otel-tool-parents", daemon=True)
                self._thread.start()
        return out

    def _send(self, spans: list[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        with self._export_lock:
            return self.inner.export(spans)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._send(self._sort(spans, False))

    def tool_span_seen(self) -> None:
        """The joiner noted an agent's tool span: held spans are looked at again (in this module's thread)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopped:
            with self._lock:
                first = min((d for d, _, _ in self._held), default=None)
            self._wake.wait(None if first is None else max(0.0, first - self._clock()) + 0.01)
            self._wake.clear()
            if self._stopped:
                return
            try:
                self._send(self._sort((), False))
            except Exception:  # the exporter's failure is counted by it; this thread goes on
                pass

    def release(self) -> None:
        """Export every held span (re-parented when its tool span came): at exit, after the joiner's last release."""
        self._stopped = True
        self._wake.set()
        self._send(self._sort((), True))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self.inner.shutdown()
