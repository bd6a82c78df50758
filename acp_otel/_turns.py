"""The agent level: prompt turns and their streamed updates, on plain ACP dicts.

The engine hands every message of a session with a turn in flight to :meth:`TurnLayer.route`, once (whichever
side and adapter saw it), and the turn layer answers where its span hangs and whether it gets one of its own. A
turn counts its chunks per kind and the time to the first agent chunk; each ``toolCallId`` becomes one
``execute_tool {name}`` span, child of the turn (:mod:`._tool_calls`), when this side makes tool spans; other
updates become events (:mod:`._turn_updates`); usage and cost come from ``usage_update`` updates and the prompt's
result; what the turn says as it ends is in :mod:`._turn_summary`. Nothing here raises into the caller: the
engine wraps every call.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context, set_value
from opentelemetry.trace import Span, SpanKind

from . import _content as content
from . import _semconv as sc
from ._agent_profiles import UNKNOWN, AgentProfile
from ._metrics import Instruments
from ._settings import Settings
from ._tool_calls import ToolCalls, permission_tool_call
from ._turn_state import UNSPANNED_TOOL_KEY, Turn
from ._turn_summary import CHUNK_ATTRIBUTES, end_attributes, record_turn_metrics
from ._turn_updates import TurnEvents
from ._usage import note_usage_update, take_usage

_log = logging.getLogger("acp_otel")

_TOOL_UPDATES = frozenset(("tool_call", "tool_call_update"))
_USAGE_UPDATE = sc.USAGE_UPDATE

# What a message is to the turn of its session (the engine works it out once per method name): a session/update;
# a permission request (under the tool call it names); an fs/* or terminal/* request (under the tool call it
# serves); anything else.
ROLE_OTHER, ROLE_UPDATE, ROLE_PERMISSION, ROLE_SERVING = range(4)  # the last two serve tool calls (>= compares)


class TurnLayer:
    """Starts and ends turn spans, routes the messages of a turn, counts chunks, records the turn metrics."""

    def __init__(self, tracer: trace.Tracer, settings: Settings, instruments: Instruments | None) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._tools = ToolCalls(tracer, settings, instruments)
        mode = settings.notification_spans
        # Whether a session/update of a session with a turn in flight gets a span of its own (``all`` mode);
        # otherwise it is counted on the turn. Read once by the engine.
        self.update_spans = mode == "all"
        self._turn_events = mode == "turn"  # non-chunk updates become events, kind only
        self._all_events = mode == "events"  # every update becomes an event (the older mode)
        self._capture = settings.capture_content
        self._max_len = settings.capture_content_max_length
        self._events = TurnEvents(settings)
        self._usage = settings.usage
        self._usage_auto = settings.usage == "auto"
        self._tools_always = settings.tool_spans == "always"
        self._tools_auto = settings.tool_spans == "auto"
        # Told of each turn's start and end (``turn_started(turn)`` / ``turn_ended(turn)``): the proxy's receiver
        # of the agent's own telemetry, which hangs the agent's spans under the turn. None: nobody asked.
        self.observer: Any = None

    # ------------------------------------------------------------------ turns

    def start(
        self,
        request_span: Span | None,
        parent: Context,
        session_id: str,
        facts: dict[str, Any],
        *,
        agent_traced: bool = False,
        costs: dict[str, tuple[float, str]] | None = None,
        params: Any = None,
        profile: AgentProfile = UNKNOWN,
        usage_totals: dict[str, dict[str, int]] | None = None,
        agent_reports: tuple[bool, bool] = (False, False),
    ) -> Turn:
        """A turn for a session/prompt: its ``request_span`` (ACP v1, started under ``parent``), or, when
        ``request_span`` is None (ACP v2, where ``session/prompt`` answers when the prompt is accepted), an
        INTERNAL span ``invoke_agent [agent]`` of its own under ``parent``, ending at the ``idle`` state.

        ``agent_traced``: the agent's messages on this connection carried trace context (so it reports its
        own usage); ``costs``: the connection's last cumulative cost per session; ``params``: the prompt's
        (its content is recorded only with ``capture_content``); ``profile``: the agent's profile;
        ``usage_totals``: the connection's last running total of token counts per session; ``agent_reports``:
        whether the agent's own telemetry reports its tool calls and its usage (then this side does not, in
        the ``auto`` modes).
        """
        agent = facts.get(sc.GEN_AI_AGENT_NAME)
        if request_span is not None:
            turn = Turn(request_span, parent, session_id, False, agent)
            turn.profile, turn.usage_totals = profile, usage_totals
            self._begin(turn, agent_traced, costs, params, agent_reports)
            return turn
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.INVOKE_AGENT,
            sc.GEN_AI_CONVERSATION_ID: session_id,
        }
        attributes.update(facts)
        name = f"{sc.ACP_TURN_SPAN_NAME} {agent}" if type(agent) is str else sc.ACP_TURN_SPAN_NAME
        span = self._tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes)
        turn = Turn(span, parent, session_id, True, agent)
        turn.profile, turn.usage_totals = profile, usage_totals
        self._begin(turn, agent_traced, costs, params, agent_reports)
        return turn

    def _begin(
        self,
        turn: Turn,
        agent_traced: bool,
        costs: dict[str, tuple[float, str]] | None,
        params: Any,
        agent_reports: tuple[bool, bool],
    ) -> None:
        mode = self._usage
        turn.reports_usage = mode == "always" or (mode == "auto" and not agent_traced and not agent_reports[1])
        turn.agent_tools = agent_reports[0]
        turn.costs = costs
        self._tell_observer("turn_started", turn)
        if self._capture:
            turn.output = []
            if turn.span.is_recording():
                try:  # whatever the prompt holds, the turn keeps its span
                    turn.span.set_attributes(content.input_attributes(params, self._max_len))
                except Exception:
                    _log.debug("acp_otel: failed to record the prompt's content", exc_info=True)

    def end(self, turn: Turn, ended_by: str | None = None, timed: bool | None = None) -> None:
        """End the turn's open tool calls (marked), annotate the turn span, record the turn metrics.

        A v2 turn span is ended here; a v1 turn's span is the request span, which the engine ends.
        ``timed``: whether to record the turn's metrics (the engine knows for a v1 turn: when its request is
        timed); ``None``: when the instruments record.
        """
        if turn.ended:
            return
        turn.ended = True
        if turn.tools:
            self._tools.end_all(turn, ended_by or sc.ENDED_BY_TURN)
        span = turn.span
        now = time.monotonic()
        if span.is_recording():
            span.set_attributes(end_attributes(turn, ended_by, self._max_len))
        instruments = self._instruments
        if timed is None:
            timed = instruments is not None and instruments.recording()
        if timed and instruments is not None:
            record_turn_metrics(instruments, turn, now)
        if turn.own_span:
            span.end()
        self._tell_observer("turn_ended", turn)

    def _tell_observer(self, event: str, turn: Turn) -> None:
        """``turn_started`` / ``turn_ended`` to the observer, if any (its failure is not the turn's)."""
        observer = self.observer
        if observer is not None:
            try:
                getattr(observer, event)(turn)
            except Exception:
                _log.debug("acp_otel: the turn observer failed", exc_info=True)

    def end_tools(self, turn: Turn, ended_by: str) -> None:
        """End the turn's open tool calls, marked ``acp.tool_call.ended_by = ended_by`` (not an error)."""
        self._tools.end_all(turn, ended_by)

    # ---------------------------------------------------------------- updates

    # ---------------------------------------------------------------- routing

    def route(
        self,
        turn: Turn,
        role: int,
        params: Any,
        parent: Context,
        has_span: bool,
        sent: bool,
        origin_traced: bool,
    ) -> Context:
        """One message of a session with ``turn`` in flight, either direction: account for it and say where it
        hangs. Returns the context its span (or, sent without one, the context it carries) starts under (a
        ``session/update`` gets a span only with :attr:`update_spans`).

        ``role``: what the method is to a turn (``ROLE_*``); ``has_span``: the message already has a span to hang
        from (sent: ``parent``, this process's context, holds a valid span; received: the sender's context did);
        ``sent``: this side sends it (a tool call of this side is then nearer than ``parent``'s span);
        ``origin_traced``: the process that wrote it is traced (received: ``has_span``; sent: a relayed message
        that arrived with trace context), so it reports its own usage and is the side closest to the agent.

        A message without a span to hang from goes under the turn; a permission request under the tool call it
        names (opening that tool call's span when this is its first sighting and this side makes tool spans);
        an ``fs/*`` / ``terminal/*`` request that would hang from the turn (or from nothing) under the tool call
        it serves; an update under the tool call it names, unless a traced sender's span is its parent.
        """
        if role == ROLE_UPDATE:  # the per-chunk path: written out here, one call per update
            if origin_traced and self._usage_auto:  # a traced agent reports usage itself
                turn.reports_usage = False
            update = params.get("update") if type(params) is dict else None
            if type(update) is dict:
                kind = update.get("sessionUpdate")
                turn.updates += 1
                if type(kind) is not str:  # hostile: not even hashable, perhaps
                    kind = None
                elif kind in CHUNK_ATTRIBUTES:
                    turn.chunks[kind] = turn.chunks.get(kind, 0) + 1
                    if turn.first_chunk is None and kind in sc.AGENT_CHUNK_KINDS:
                        turn.first_chunk = time.monotonic()
                    if turn.output is not None and kind == "agent_message_chunk":
                        self._events.keep_text(turn, update)
                    if self._all_events:
                        self._events.add(turn, update, params)
                    return parent if has_span else turn.context
                context = None
                if kind in _TOOL_UPDATES:
                    make_tools = self._tools_always or (self._tools_auto and not origin_traced and not turn.agent_tools)
                    context = self._tools.update(turn, update, make_tools)
                    if context is None and not make_tools and turn.agent_tools:
                        self._tools.follow(turn, update)  # the agent's own span reports it: its id is kept
                    if self._all_events or (self._turn_events and context is None and not make_tools):
                        self._events.add(turn, update, params)  # no tool span on this side: the fact on the turn
                elif self._all_events or self._turn_events:
                    self._events.add(turn, update, params)
                if kind == _USAGE_UPDATE:
                    note_usage_update(turn, update)
                if kind == sc.V2_STATE_UPDATE and turn.own_span:
                    state = update.get("state")
                    if state == "idle":
                        self.take_result(turn, update)
                        self.end(turn)
                if context is not None and (sent or not has_span):
                    return context
            return parent if has_span else turn.context
        if role == ROLE_PERMISSION:
            if sent or not has_span:
                make_tools = self._tools_always or (self._tools_auto and not origin_traced and not turn.agent_tools)
                tool_call = permission_tool_call(params)
                context = self._tools.sight(turn, tool_call, make_tools)
                if context is not None:
                    return context
                if not has_span and not make_tools and turn.agent_tools:  # the agent's own span reports it
                    tool_call_id = self._tools.follow(turn, tool_call)
                    if tool_call_id is not None:
                        return set_value(UNSPANNED_TOOL_KEY, tool_call_id, turn.context)
            elif self._tools_always:
                # Tool spans on both sides: first sighting here too; the traced sender's span stays the parent.
                self._tools.sight(turn, permission_tool_call(params), True)
        elif role == ROLE_SERVING and (not has_span or (sent and trace.get_current_span(parent) is turn.span)):
            # A span the application opened itself (or the traced agent's, relayed) is kept.
            context = turn.served_tool_context(params)
            if context is not None:
                return context
            if turn.agent_tools:  # served a tool call the agent's own span reports
                tool_call_id = turn.served_unspanned_id(params)
                if tool_call_id is not None:
                    return set_value(UNSPANNED_TOOL_KEY, tool_call_id, parent if has_span else turn.context)
        return parent if has_span else turn.context

    def take_result(self, turn: Turn, source: Any) -> None:
        """Stop reason and usage from a v1 ``session/prompt`` result or a v2 ``idle`` state update."""
        if type(source) is not dict:
            return
        span = turn.span
        stop_reason = source.get("stopReason")
        if type(stop_reason) is str:
            turn.stop_reason = stop_reason
            if turn.own_span and span.is_recording():  # v1: the engine sets it on the request span
                span.set_attribute(sc.ACP_STOP_REASON, stop_reason)
        take_usage(turn, source)
