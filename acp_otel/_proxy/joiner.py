"""Hang the agent's own spans and logs under the proxy's turn spans (the per-subtree rule of docs/proxy.md).

The proxy tells the joiner when each turn starts and ends (it is the engine's turn observer); the receiver hands
it every OTLP request the agent exports, as ``opentelemetry.proto`` messages, which it changes in place.

The rule, for each span of the agent (:mod:`.span_fates`):

* a span that started inside exactly one turn's window (from the turn span's start to its end; an open turn has
  no end yet) joins that turn: it moves to the turn's trace, under its own parent when that parent is in the same
  trace, else under the turn span (it is the topmost span of the turn: its parent is outside the window, or in
  another turn, or never exported). Background work that runs in the window joins it too;
* inside several windows at once (turns of several sessions), the span's session attribute picks the turn; without
  one the span is left alone, with a link to each turn, and so is its subtree;
* a span outside every window whose parent moved follows it (its trace id changes, its parent stays): work a
  turn started and that outlives it;
* every other span is left alone (started before the first turn, after the last, between turns).

Children are exported before their parents: a span whose parent has not arrived is held, with whatever hangs from
it, until the parent arrives (:mod:`.held_spans`), for at most :data:`HOLD_S` and at most :data:`MAX_HELD` spans
(then it is decided as if it had no parent); :meth:`Joiner.release` hands out what expired and, at exit,
everything. A span that started before every turn is never held (nor is its parent a turn's).

Logs follow their span's new trace id, waiting for it when it has not come (:mod:`.log_joining`); a log without a
span gets the context of the one turn open at its time. By default only the spans a user reads are forwarded
(:mod:`.span_filter`).
Nothing here raises into the receiver: a request the joiner cannot read is forwarded as it came.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .agent_facts import AgentFacts
from .held_spans import HeldSpans
from .log_joining import LogJoining
from .proto_spans import Entry, Key, append, entries, remove, spans
from .span_fates import LEFT, Fates
from .span_filter import SpanFilter
from .turn_windows import TurnWindow, TurnWindows

HOLD_S = 5.0
"""How long a span outside every turn's window waits for its parent (the OTel SDK's batch processor exports every
5 s by default, so a parent that ends later arrives in the next batch)."""
MAX_HELD = 4096
"""Spans held at once; past this the oldest is released as it came."""
SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "acp.session.id")
"""Span attributes that name an ACP session in agents' spans, beside those an agent's profile names."""


class Joiner:
    """Joins the agent's spans and logs to the proxy's turns (see the module's docstring). Thread-safe."""

    def __init__(
        self,
        session_keys: Iterable[str] = (),
        tool_call_keys: Iterable[str] = (),
        on_facts: Callable[[bool, bool], None] | None = None,
        *,
        hold_s: float = HOLD_S,
        max_held: int = MAX_HELD,
        clock: Callable[[], float] = time.monotonic,
        all_spans: bool = True,
    ) -> None:
        """``session_keys`` / ``tool_call_keys``: the span attributes the agent's profile says carry the ACP
        session id and tool call id (beside the conventions' ones); ``on_facts(tools, usage)``: called once the
        agent's spans are seen to report its tool calls (an ``execute_tool`` span with a tool call id) or its
        token usage (``gen_ai.usage.*``); ``all_spans``: forward every span (else only what a user reads:
        :mod:`.span_filter`)."""
        self._lock = threading.Lock()
        self._windows = TurnWindows(tuple(dict.fromkeys((*session_keys, *SESSION_KEYS))))
        self._fates = Fates(self._windows)
        self._held = HeldSpans(self._decided, self._fates.get, max_held)
        self._facts = AgentFacts(tool_call_keys, on_facts)
        self._filter = SpanFilter(all_spans, self._windows.is_turn_span)
        self._logs = LogJoining(self._windows, self._fates, self._filter, clock)
        self._hold_s = hold_s
        self._clock = clock

    @property
    def spans_moved(self) -> int:
        return self._fates.spans_moved

    @property
    def spans_linked(self) -> int:
        return self._fates.spans_linked

    @property
    def spans_left_out(self) -> int:
        """Spans not forwarded: not what a user reads (:mod:`.span_filter`)."""
        return self._filter.left_out

    @property
    def on_tool_span(self) -> Callable[[], None] | None:
        """Called (under no lock of ours) when one of the agent's tool spans is noted (see :meth:`tool_span`)."""
        return self._facts.on_tool_span

    @on_tool_span.setter
    def on_tool_span(self, callback: Callable[[], None] | None) -> None:
        self._facts.on_tool_span = callback

    def proxy_tools(self, lookup: Callable[[bytes, str], bytes | None]) -> None:
        """``lookup(trace_id, tool_call_id)``: the proxy's ``execute_tool`` span of that tool call, if it made one
        (the agent's spans of that call hang under it)."""
        self._facts.proxy_tool_span = lookup

    # ------------------------------------------------------------------ turns (the engine's turn observer)

    def turn_started(self, turn: Any, at_ns: int | None = None) -> None:
        """A turn (:class:`~acp_otel._turn_state.Turn`) began, at ``at_ns`` (wall clock; now when ``None``)."""
        context = turn.span.get_span_context()
        if context.is_valid:
            now = time.time_ns() if at_ns is None else at_ns
            self.open_window(id(turn), context.trace_id, context.span_id, turn.session_id, now)

    def turn_ended(self, turn: Any, at_ns: int | None = None) -> None:
        """A turn ended, at ``at_ns`` (wall clock; now when ``None``)."""
        self.close_window(id(turn), time.time_ns() if at_ns is None else at_ns)

    def open_window(self, key: int, trace_id: int, span_id: int, session_id: str, at_ns: int) -> None:
        """The turn ``key`` (whose span has these ids) began at ``at_ns``."""
        with self._lock:
            self._windows.open(key, trace_id, span_id, session_id, at_ns)

    def close_window(self, key: int, at_ns: int) -> None:
        """The turn ``key`` ended at ``at_ns``."""
        with self._lock:
            self._windows.close(key, at_ns)

    def windows(self) -> list[TurnWindow]:
        """The turns known (a copy)."""
        with self._lock:
            return list(self._windows.turns)

    # ------------------------------------------------------------------ spans

    def join_spans(self, request: ExportTraceServiceRequest) -> None:
        """Join one request's spans in place: moved, re-parented, linked, or held (taken out of ``request``);
        spans held before and now decided are added to it."""
        with self._lock:
            self._facts.note_request(request)
            batch: dict[Key, Entry] = {(e.span.trace_id, e.span.span_id): e for e in entries(request)}
            held_now: set[Key] = set()
            released: list[Entry] = []
            deciding: set[Key] = set()
            fates, held = self._fates, self._held
            for first in batch:  # parents before children, without recursion (nesting may be deep)
                stack = [first]
                while stack:
                    key = stack[-1]
                    if key in fates or key in held_now:
                        stack.pop()
                        continue
                    span = batch[key].span
                    parent_key: Key = (span.trace_id, span.parent_span_id)
                    if (
                        span.parent_span_id
                        and parent_key in batch
                        and parent_key not in fates
                        and parent_key not in held_now
                        and parent_key not in deciding  # a cycle of parents (hostile): decided as it stands
                    ):
                        deciding.add(key)
                        stack.append(parent_key)
                        continue
                    stack.pop()
                    if (span.parent_span_id and parent_key in held_now) or not self._decide(key, span):
                        held.hold(key, batch[key], self._clock() + self._hold_s)
                        held_now.add(key)
                    else:
                        released.extend(held.settled(key))
            remove(request, held_now)
            released.extend(held.overflow())
            append(request, released)
            self._filter.filter(request)
        self._facts.tell_tools()

    def release(self, everything: bool = False) -> ExportTraceServiceRequest | None:
        """Spans held past :data:`HOLD_S` (all of them when ``everything``), left alone, as one request."""
        with self._lock:
            out = self._held.due(self._clock(), everything)
            request = None
            if out:
                request = ExportTraceServiceRequest()
                append(request, out)
                self._filter.filter(request)
                if not request.resource_spans or not any(spans(request)):
                    request = None
        self._facts.tell_tools()
        return request

    def held(self) -> int:
        """Spans waiting for their parent."""
        with self._lock:
            return len(self._held)

    def tool_span(self, trace_id: bytes, tool_call_id: str) -> bytes | None:
        """The id of the agent's ``execute_tool`` span of ``tool_call_id`` in trace ``trace_id`` (after joining:
        a turn's trace), if one was seen."""
        with self._lock:
            return self._facts.tool_span(trace_id, tool_call_id)

    def _decide(self, key: Key, span: Any) -> bool:
        """Decide ``span``'s fate and apply it; ``False``: it must wait for its parent."""
        if span.trace_id in self._windows.traces:  # it took its parent from the turn's _meta itself: as it is
            self._fates.remember(key, span.trace_id)
            self._facts.note_tool(span)
            return True
        parent: bytes | None = None
        if span.parent_span_id:
            parent_key = (span.trace_id, span.parent_span_id)
            parent = self._fates.get(parent_key)
            if parent is None:
                first = self._windows.first_start()
                if parent_key in self._held or (first is not None and span.start_time_unix_nano >= first):
                    return False  # its parent may still move into a turn's trace
                parent = LEFT  # started before every turn: so did its parent
        self._decided(key, Entry(span, None, "", None, ""), parent)
        return True

    def _decided(self, key: Key, entry: Entry, parent: bytes | None) -> None:
        """Apply the rule to ``entry``'s span given its parent's fate, and remember its own."""
        self._fates.remember(key, self._fates.apply(entry.span, parent))
        self._facts.note_tool(entry.span)

    # ------------------------------------------------------------------ logs

    def join_logs(self, request: ExportLogsServiceRequest) -> None:
        """Logs follow their span's new trace id (:mod:`.log_joining`); those naming a span not seen yet are taken
        out, to wait for it (:meth:`ready_logs`)."""
        with self._lock:
            self._logs.join(request)

    def ready_logs(self, everything: bool = False) -> ExportLogsServiceRequest | None:
        """Waiting log records whose span has come or whose bound is past (all of them when ``everything``)."""
        with self._lock:
            return self._logs.ready(everything)

    def logs_waiting(self) -> int:
        with self._lock:
            return len(self._logs)
