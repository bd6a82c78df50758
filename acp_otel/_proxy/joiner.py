"""Hang the agent's own spans and logs under the proxy's turn spans (the per-subtree rule of docs/proxy.md).

The proxy tells the joiner when each turn starts and ends (it is the engine's turn observer); the receiver hands
it every OTLP request the agent exports, as ``opentelemetry.proto`` messages, which it changes in place.

The rule, for each span of the agent:

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
it, until the parent arrives, for at most :data:`HOLD_S` and at most :data:`MAX_HELD` spans (then it is decided
as if it had no parent); :meth:`Joiner.release` hands out what expired and, at exit, everything. A span that
started before every turn is never held (nor is its parent a turn's).

Logs follow their span's new trace id; a log without a span gets the context of the one turn open at its time.
Nothing here raises into the receiver: a request the joiner cannot read is forwarded as it came.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

HOLD_S = 5.0
"""How long a span outside every turn's window waits for its parent (the OTel SDK's batch processor exports every
5 s by default, so a parent that ends later arrives in the next batch)."""
MAX_HELD = 4096
"""Spans held at once; past this the oldest is released as it came."""
MAX_KNOWN = 50_000
"""Spans whose fate is remembered (for their children and logs: some 12 MB at most); the oldest are forgotten
first."""
MAX_KNOWN_TOOLS = 4096
"""The agent's ``execute_tool`` spans remembered (for the proxy's own spans that serve their tool calls)."""
MAX_TURNS = 1024
"""Turn windows remembered (closed ones are forgotten oldest first)."""
SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "acp.session.id")
"""Span attributes that name an ACP session in agents' spans, beside those an agent's profile names."""

_LEFT = b""  # a span left alone
_LINKED = b"L"  # a span left alone and linked to several turns: its subtree is not joined either

_Key = tuple[bytes, bytes]


class TurnWindow:
    """One turn of the proxy: its span's ids, its session and when it started and ended (wall clock, ns)."""

    __slots__ = ("end_ns", "session_id", "span_id", "start_ns", "trace_id")

    def __init__(self, trace_id: bytes, span_id: bytes, session_id: str, start_ns: int) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.session_id = session_id
        self.start_ns = start_ns
        self.end_ns: int | None = None

    def holds(self, t_ns: int) -> bool:
        return self.start_ns <= t_ns and (self.end_ns is None or t_ns <= self.end_ns)


class _Held:
    __slots__ = ("deadline", "parent", "resource", "schema", "scope", "scope_schema", "span")

    def __init__(self, span: Span, resource: Any, schema: str, scope: Any, scope_schema: str, deadline: float) -> None:
        self.span = span
        self.resource = resource
        self.schema = schema
        self.scope = scope
        self.scope_schema = scope_schema
        self.deadline = deadline
        self.parent: _Key = (span.trace_id, span.parent_span_id)


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
    ) -> None:
        """``session_keys`` / ``tool_call_keys``: the span attributes the agent's profile says carry the ACP
        session id and tool call id (beside the conventions' ones); ``on_facts(tools, usage)``: called once the
        agent's spans are seen to report its tool calls (an ``execute_tool`` span with a tool call id) or its
        token usage (``gen_ai.usage.*``)."""
        self._lock = threading.Lock()
        self._turns: list[TurnWindow] = []
        self._turn_traces: set[bytes] = set()
        self._by_turn: dict[int, TurnWindow] = {}
        self._fate: OrderedDict[_Key, bytes] = OrderedDict()
        self._held: OrderedDict[_Key, _Held] = OrderedDict()
        self._waiting: dict[_Key, list[_Key]] = {}
        self._session_keys = tuple(dict.fromkeys((*session_keys, *SESSION_KEYS)))
        self._tool_keys = tuple(dict.fromkeys((*tool_call_keys, "gen_ai.tool.call.id")))
        self._on_facts = on_facts
        self._seen_tools = False
        self._seen_usage = False
        self._hold_s = hold_s
        self._max_held = max_held
        self._clock = clock
        self.spans_moved = 0
        self.spans_linked = 0
        # The agent's execute_tool spans as decided: (trace id, tool call id) -> span id (see tool_span).
        self._tool_spans: OrderedDict[tuple[bytes, str], bytes] = OrderedDict()
        self.on_tool_span: Callable[[], None] | None = None  # called (under no lock of ours) when one is noted
        self._noted = False

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
        trace_bytes = trace_id.to_bytes(16, "big")
        window = TurnWindow(trace_bytes, span_id.to_bytes(8, "big"), session_id, at_ns)
        with self._lock:
            self._turns.append(window)
            self._turn_traces.add(trace_bytes)
            self._by_turn[key] = window
            if len(self._turns) > MAX_TURNS:
                closed = next((w for w in self._turns if w.end_ns is not None), self._turns[0])
                self._turns.remove(closed)
                self._turn_traces.discard(closed.trace_id)
                for turn_key, value in list(self._by_turn.items()):
                    if value is closed:
                        del self._by_turn[turn_key]

    def close_window(self, key: int, at_ns: int) -> None:
        """The turn ``key`` ended at ``at_ns``."""
        with self._lock:
            window = self._by_turn.pop(key, None)
            if window is not None:
                window.end_ns = at_ns

    def windows(self) -> list[TurnWindow]:
        """The turns known (a copy)."""
        with self._lock:
            return list(self._turns)

    # ------------------------------------------------------------------ spans

    def join_spans(self, request: ExportTraceServiceRequest) -> None:
        """Join one request's spans in place: moved, re-parented, linked, or held (taken out of ``request``);
        spans held before and now decided are added to it."""
        with self._lock:
            self._note_facts(request)
            batch: dict[_Key, tuple[Span, Any, str, Any, str]] = {}
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        batch[(span.trace_id, span.span_id)] = (
                            span,
                            resource_spans.resource,
                            resource_spans.schema_url,
                            scope_spans.scope,
                            scope_spans.schema_url,
                        )
            held_now: set[_Key] = set()
            released: list[_Held] = []
            deciding: set[_Key] = set()

            for first in batch:  # parents before children, without recursion (nesting may be deep)
                stack = [first]
                while stack:
                    key = stack[-1]
                    if key in self._fate or key in held_now:
                        stack.pop()
                        continue
                    span = batch[key][0]
                    parent_key: _Key = (span.trace_id, span.parent_span_id)
                    if (
                        span.parent_span_id
                        and parent_key in batch
                        and parent_key not in self._fate
                        and parent_key not in held_now
                        and parent_key not in deciding  # a cycle of parents (hostile): decided as it stands
                    ):
                        deciding.add(key)
                        stack.append(parent_key)
                        continue
                    stack.pop()
                    if (span.parent_span_id and parent_key in held_now) or not self._decide(span):
                        self._hold(key, *batch[key])
                        held_now.add(key)
                    else:
                        released.extend(self._settled(key))
            if held_now:
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        kept = [s for s in scope_spans.spans if (s.trace_id, s.span_id) not in held_now]
                        if len(kept) != len(scope_spans.spans):
                            del scope_spans.spans[:]
                            scope_spans.spans.extend(kept)
            released.extend(self._overflow())
            _append(request, released)
        self._tell_tools()

    def _tell_tools(self) -> None:
        """Call :attr:`on_tool_span` if an ``execute_tool`` span was noted since the last call."""
        if self._noted:
            self._noted = False
            callback = self.on_tool_span
            if callback is not None:
                try:
                    callback()
                except Exception:  # the proxy's side: never the receiver's problem
                    pass

    def release(self, everything: bool = False) -> ExportTraceServiceRequest | None:
        """Spans held past :data:`HOLD_S` (all of them when ``everything``), left alone, as one request."""
        with self._lock:
            now = self._clock()
            out: list[_Held] = []
            for key in self._roots():
                held = self._held.get(key)
                if held is not None and (everything or held.deadline <= now):
                    out.extend(self._give_up(key))
            while everything and self._held:  # a cycle of parents (hostile input): out as they are
                out.extend(self._give_up(next(iter(self._held))))
            request = None
            if out:
                request = ExportTraceServiceRequest()
                _append(request, out)
        self._tell_tools()
        return request

    def held(self) -> int:
        """Spans waiting for their parent."""
        with self._lock:
            return len(self._held)

    def _decide(self, span: Span) -> bool:
        """Decide ``span``'s fate and apply it; ``False``: it must wait for its parent."""
        key = (span.trace_id, span.span_id)
        if span.trace_id in self._turn_traces:  # it took its parent from the turn's _meta itself: as it is
            self._remember(key, span.trace_id)
            self._note_tool(span)
            return True
        parent: bytes | None = None
        if span.parent_span_id:
            parent_key = (span.trace_id, span.parent_span_id)
            parent = self._fate.get(parent_key)
            if parent is None:
                if parent_key in self._held or (self._turns and span.start_time_unix_nano >= self._turns[0].start_ns):
                    return False  # its parent may still move into a turn's trace
                parent = _LEFT  # started before every turn: so did its parent
        self._remember(key, self._apply(span, parent))
        return True

    def _apply(self, span: Span, parent: bytes | None) -> bytes:
        """Move, re-parent or link ``span`` given its parent's fate (``None``: it has no parent, or its parent
        never came); returns its own fate."""
        fate = self._apply_fate(span, parent)
        self._note_tool(span)
        return fate

    def _note_tool(self, span: Span) -> None:
        """Remember where a span naming a tool call (one of the tool call id keys) went, for :meth:`tool_span`: an
        ``execute_tool`` span wins over others of the same tool call (OpenCode's ``Tool.execute`` is not one)."""
        tool_call_id = _attribute(span, self._tool_keys)
        if tool_call_id is None:
            return
        key = (span.trace_id, tool_call_id)
        execute = any(
            kv.key == "gen_ai.operation.name" and kv.value.string_value == "execute_tool" for kv in span.attributes
        )
        if execute or key not in self._tool_spans:
            self._tool_spans[key] = span.span_id
            self._noted = True
            if len(self._tool_spans) > MAX_KNOWN_TOOLS:
                self._tool_spans.popitem(last=False)

    def tool_span(self, trace_id: bytes, tool_call_id: str) -> bytes | None:
        """The id of the agent's ``execute_tool`` span of ``tool_call_id`` in trace ``trace_id`` (after joining:
        a turn's trace), if one was seen."""
        with self._lock:
            return self._tool_spans.get((trace_id, tool_call_id))

    def _apply_fate(self, span: Span, parent: bytes | None) -> bytes:
        window = self._window_of(span)
        if isinstance(window, TurnWindow):  # it ran in this turn: it joins it, under its parent if that did too
            if parent == window.trace_id:
                span.trace_id = parent
                self.spans_moved += 1
                return parent
            return self._move(span, window)
        if parent == _LINKED:
            return _LEFT
        if parent:  # moved: background work of a turn stays with it
            span.trace_id = parent
            self.spans_moved += 1
            return parent
        if window is None:
            return _LEFT
        return self._link(span, window)

    def _move(self, span: Span, window: TurnWindow) -> bytes:
        span.trace_id = window.trace_id
        span.parent_span_id = window.span_id
        self.spans_moved += 1
        return window.trace_id

    def _link(self, span: Span, windows: list[TurnWindow]) -> bytes:
        for window in windows:
            span.links.add(trace_id=window.trace_id, span_id=window.span_id)
        self.spans_linked += 1
        return _LINKED

    def _window_of(self, span: Span) -> TurnWindow | list[TurnWindow] | None:
        """The turn whose window holds the span's start; several: the one its session attribute names, else
        the list of them; none: ``None``."""
        start = span.start_time_unix_nano
        found = [w for w in self._turns if w.holds(start)]
        if len(found) <= 1:
            return found[0] if found else None
        session = _attribute(span, self._session_keys)
        if session is not None:
            named = [w for w in found if w.session_id == session]
            return named[-1] if named else None
        return found

    def _remember(self, key: _Key, fate: bytes) -> None:
        self._fate[key] = fate
        if len(self._fate) > MAX_KNOWN:
            self._fate.popitem(last=False)

    def _settled(self, key: _Key) -> list[_Held]:
        """``key`` is decided: its held children are decided in turn (returned, to be sent)."""
        out: list[_Held] = []
        stack = [key]
        while stack:
            parent = stack.pop()
            fate = self._fate.get(parent)
            for child_key in self._waiting.pop(parent, ()):
                held = self._held.pop(child_key, None)
                if held is None:
                    continue
                self._remember(child_key, self._apply(held.span, fate if fate is not None else _LEFT))
                out.append(held)
                stack.append(child_key)
        return out

    def _hold(self, key: _Key, span: Span, resource: Any, schema: str, scope: Any, scope_schema: str) -> None:
        copy = Span()
        copy.CopyFrom(span)
        res = type(resource)()
        res.CopyFrom(resource)
        sco = type(scope)()
        sco.CopyFrom(scope)
        held = _Held(copy, res, schema, sco, scope_schema, self._clock() + self._hold_s)
        self._held[key] = held
        self._waiting.setdefault(held.parent, []).append(key)

    def _give_up(self, key: _Key) -> list[_Held]:
        """The parent of held ``key`` never came: ``key`` is decided as if it had none (with what waits on it)."""
        held = self._held.pop(key)
        waiting = self._waiting.get(held.parent)
        if waiting is not None:
            if key in waiting:
                waiting.remove(key)
            if not waiting:
                del self._waiting[held.parent]
        self._remember(key, self._apply(held.span, None))
        return [held, *self._settled(key)]

    def _roots(self) -> list[_Key]:
        """Held spans whose parent is not held itself, oldest first (the others go with them)."""
        return [key for key, held in self._held.items() if held.parent not in self._held]

    def _overflow(self) -> list[_Held]:
        out: list[_Held] = []
        while len(self._held) > self._max_held:
            roots = self._roots() or [next(iter(self._held))]  # (none: a cycle of parents)
            for key in roots:  # oldest first, each with what hangs from it
                if len(self._held) <= self._max_held:
                    break
                if key in self._held:
                    out.extend(self._give_up(key))
        return out

    def _note_facts(self, request: ExportTraceServiceRequest) -> None:
        if self._on_facts is None or (self._seen_tools and self._seen_usage):
            return
        tools = usage = False
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    for kv in span.attributes:
                        if kv.key.startswith("gen_ai.usage."):
                            usage = True
                        elif (
                            kv.key == "gen_ai.operation.name"
                            and kv.value.string_value == "execute_tool"
                            and _attribute(span, self._tool_keys) is not None
                        ):
                            tools = True
        tools, usage = tools and not self._seen_tools, usage and not self._seen_usage
        if tools or usage:
            self._seen_tools |= tools
            self._seen_usage |= usage
            try:
                self._on_facts(tools, usage)
            except Exception:  # the engine's side: never the receiver's problem
                pass

    # ------------------------------------------------------------------ logs

    def join_logs(self, request: ExportLogsServiceRequest) -> None:
        """Logs follow their span's new trace id; a log without one gets the context of the one turn open at
        its time (none, or several: left as it is)."""
        with self._lock:
            for resource_logs in request.resource_logs:
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        if record.trace_id and record.span_id:
                            key = (record.trace_id, record.span_id)
                            fate = self._fate.get(key)
                            if fate is None and key in self._held:  # in a turn's window: that turn's, sure
                                window = self._window_of(self._held[key].span)
                                fate = window.trace_id if isinstance(window, TurnWindow) else None
                            if fate and fate != _LINKED:
                                record.trace_id = fate
                        elif not record.trace_id:
                            at = record.time_unix_nano or record.observed_time_unix_nano
                            found = [w for w in self._turns if w.holds(at)] if at else []
                            if len(found) == 1:
                                record.trace_id = found[0].trace_id
                                record.span_id = found[0].span_id


def _attribute(span: Span, keys: tuple[str, ...]) -> str | None:
    for kv in span.attributes:
        if kv.key in keys:
            value = kv.value
            which = value.WhichOneof("value")
            if which == "string_value":
                return value.string_value
            if which == "int_value":
                return str(value.int_value)
    return None


def _append(request: ExportTraceServiceRequest, released: list[_Held]) -> None:
    """Add released spans to ``request``, one resource and scope entry per span (their own)."""
    for held in released:
        resource_spans = request.resource_spans.add()
        resource_spans.resource.CopyFrom(held.resource)
        resource_spans.schema_url = held.schema
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(held.scope)
        scope_spans.schema_url = held.scope_schema
        scope_spans.spans.append(held.span)
