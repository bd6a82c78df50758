"""Starting and ending a message's span: the one place spans of ACP messages are started, named, annotated and
ended, and where a ``session/prompt``'s turn starts and ends with its request.

:meth:`MessageSpans.start` builds the span's start attributes (cached per connection and session), names it
(a v1 turn after its agent) and starts the prompt's turn; :meth:`MessageSpans.finish` annotates the span by how
the call ended (result, JSON-RPC error, exception, cancellation), ends it with its turn and records the
request's duration. Plain JSON-RPC values only: no SDK, no wrapt.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import _semconv as sc
from ._agent_identity import AgentIdentity
from ._connection import PeerState, initialize_params, initialize_result, negotiated_version
from ._content import truncate
from ._methods import MethodInfo
from ._metrics import Instruments
from ._settings import Settings
from ._turn_state import UNSPANNED_TOOL_KEY, Turn
from ._turn_updates import update_attributes
from ._turns import ROLE_PERMISSION, TurnLayer

_log = logging.getLogger("acp_otel")

# The incoming call whose handler runs in this context, so that an exception raised by the handler
# (which the SDK turns into a -32603 response) can be named on the right span. Stored as a weak
# reference: the call holds the context, so a strong one would make a cycle per message that only the
# garbage collector frees (with the span it holds); the adapter keeps the call alive while the handler runs.
CALL_KEY = otel_context.create_key("acp_otel.incoming_call")
# Span kinds read once: an Enum member looked up on its class costs more than a Python call.
CLIENT, SERVER, PRODUCER, CONSUMER = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER

# How a call ended (MessageSpans.finish).
RESULT, RPC_ERROR, EXCEPTION, CANCELLED = range(4)

_SESSION_RESULT_METHODS = ("session/new", "session/load", "session/fork", "session/resume")

# Start attribute sets cached per connection ((method, session) pairs; more are built each time). Measured as
# in _context_facts (the engine alone, sampled, turn mode): without the cache, +11k instructions per turn at
# K = 1 (two spans), +13k at K = 20: about 5.5k per span started.
_BASE_CACHE_SIZE = 64

# Characters of an agent name kept in a turn span's name.
_MAX_AGENT_NAME = 128


class Call:
    """One traced message: its span (or ``None`` when excluded) and what ending it needs to know."""

    __slots__ = (
        "__weakref__",
        "failure",
        "info",
        "is_request",
        "method",
        "peer",
        "server",
        "session_id",
        "span",
        "started",
        "turn",
    )

    def __init__(
        self,
        span: Span | None,
        method: str,
        peer: PeerState | None,
        is_request: bool,
        info: MethodInfo,
        session_id: str | None,
        server: bool,
    ) -> None:
        self.span = span
        self.method = method
        self.info = info  # what the method name says (its request-duration attributes, say)
        self.peer = peer
        self.is_request = is_request
        self.session_id = session_id
        # error.type of an exception the handler raised (set by note_handler_exception).
        self.failure: str | None = None
        self.turn: Turn | None = None  # the turn this session/prompt started
        self.server = server  # handled here (SERVER / CONSUMER), for the request-duration metric
        self.started: float | None = None  # monotonic start, when metrics are recorded


def _str_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def note_handler_exception(exc: BaseException, rpc_code: Any, settings: Settings) -> None:
    """Name the exception a handler raised on the current incoming span (see ``Engine.note_handler_exception``)."""
    try:
        ref = otel_context.get_value(CALL_KEY)
        call = ref() if isinstance(ref, weakref.ref) else None
        if not isinstance(call, Call) or call.span is None or not call.span.is_recording():
            return
        if call.is_request:
            if rpc_code is None:  # the error response's code will follow; keep the class name
                call.failure = type(exc).__qualname__
        elif not (rpc_code == -32601 and sc.is_extension(call.method)):
            # Notifications get no response, so the span is the only place the failure shows.
            # An unknown extension notification is ignored by design: not an error.
            call.failure = str(rpc_code) if rpc_code is not None else type(exc).__qualname__
        if call.failure is not None and settings.capture_content:
            call.span.set_attribute(sc.ACP_ERROR_DETAIL, truncate(str(exc), settings.capture_content_max_length))
    except Exception:
        _log.debug("acp_otel: failed to record handler exception", exc_info=True)


class MessageSpans:
    """Starts and ends the span of each message, with the turn a ``session/prompt`` starts."""

    def __init__(
        self,
        tracer: trace.Tracer,
        settings: Settings,
        instruments: Instruments | None,
        turns: TurnLayer,
        agents: AgentIdentity,
    ) -> None:
        self._tracer = tracer
        self.clock: Callable[[], float] = time.monotonic  # of request durations (see Engine.use_clock)
        self._capture = settings.capture_content
        self._max_len = settings.capture_content_max_length
        self._instruments = instruments
        self._turns = turns
        self._agents = agents

    # ---------------------------------------------------------------- start

    def start(
        self,
        info: MethodInfo,
        method: str,
        params: Any,
        request_id: Any,
        peer: PeerState | None,
        parent: Context,
        kind: SpanKind,
        is_request: bool,
    ) -> Call:
        """Start and name the span of one message (the only place spans of messages are started)."""
        session_id = params.get("sessionId") if type(params) is dict else None
        if type(session_id) is not str:
            session_id = None
        # A copy: the sampler sees this dict, and the cached one must stay as it is.
        base = peer.base_attributes.get((method, session_id)) if peer is not None else None  # the cache hit
        if base is None:
            base = self._base_attributes(info, method, session_id, peer)
        attributes = base.copy()
        if request_id is not None:
            attributes[sc.JSONRPC_REQUEST_ID] = str(request_id)
        if info.is_update:
            update = params.get("update") if type(params) is dict else None
            if type(update) is dict:
                update_attributes(attributes, update)
        elif info.turn_role >= ROLE_PERMISSION:  # serving a tool call this side has no span for: the call's id
            tool_call_id = otel_context.get_value(UNSPANNED_TOOL_KEY, parent)
            if tool_call_id is not None:
                attributes[sc.ACP_TOOL_CALL_ID] = tool_call_id
        turn = None
        turn_peer = peer if method == sc.SESSION_PROMPT else None  # a session/prompt starts a turn
        if turn_peer is not None and session_id is not None and (turn_peer.protocol_version or 0) >= 2:
            # ACP v2: the turn is a span of its own; the request span stands for the acceptance only.
            turn = self._start_turn(turn_peer, session_id, None, parent, params)
            if kind is CLIENT:  # the sender's turn wraps its request (one trace)
                parent = turn.context
        name = method
        if turn_peer is not None and turn is None and session_id is not None:
            # A v1 turn: named like MCP names its calls, "{method} {target}" (the agent), so that trace lists
            # tell agents apart; the method stays first, as this span is also the request's.
            agent = turn_peer.attributes.get(sc.GEN_AI_AGENT_NAME)
            if type(agent) is str and agent:
                name = f"{method} {agent[:_MAX_AGENT_NAME]}"
        span = self._tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        try:
            call = Call(span, method, peer, is_request, info, session_id, kind is SERVER)
            if turn_peer is not None and session_id is not None:
                if turn is None:  # v1: the request span is the turn
                    turn = self._start_turn(turn_peer, session_id, span, parent, params)
                    turn.request = call
                call.turn = turn
            instruments = self._instruments
            if instruments is not None and is_request and instruments.recording():
                # A v1 turn and its request start together: one clock read for both.
                call.started = turn.started if turn is not None and not turn.own_span else self.clock()
            if (method == sc.INITIALIZE or self._capture) and span.is_recording():
                if method == sc.INITIALIZE and type(params) is dict:
                    initialize_params(span, peer, params)
                if self._capture and params is not None:
                    span.set_attribute(sc.ACP_PARAMS, truncate(params, self._max_len))
            return call
        except BaseException:
            span.end()  # not handed out: it would stay open
            if turn is not None and turn.own_span:
                self._turns.end(turn)
            raise

    def _base_attributes(
        self, info: MethodInfo, method: str, session_id: str | None, peer: PeerState | None
    ) -> dict[str, Any]:
        """Build the start attributes that depend on the method, session and connection only, and cache them
        per connection (until it learns more in ``initialize``): ``start`` looks in that cache first. Shared:
        callers copy before changing them."""
        cache = peer.base_attributes if peer is not None else None
        attributes = info.attributes.copy()
        if peer is not None:
            attributes.update(peer.attributes)
            if method == sc.SESSION_PROMPT and (peer.protocol_version or 0) >= 2:
                attributes.pop(sc.GEN_AI_OPERATION_NAME, None)  # the v2 turn span carries it
        if session_id is not None:
            attributes[sc.GEN_AI_CONVERSATION_ID] = session_id
        if cache is not None and len(cache) < _BASE_CACHE_SIZE:
            cache[(method, session_id)] = attributes
        return attributes

    def _start_turn(
        self, peer: PeerState, session_id: str, request_span: Span | None, parent: Context, params: Any
    ) -> Turn:
        previous = peer.turns.get(session_id)
        if previous is not None and previous.own_span:  # a v2 turn that never went idle
            self._turns.end(previous, sc.ENDED_BY_NEXT_PROMPT)
        turn = self._turns.start(
            request_span,
            parent,
            session_id,
            peer.attributes,
            agent_traced=peer.agent_traced,
            costs=peer.costs,
            params=params,
            profile=peer.profile or self._agents.default,
            usage_totals=peer.usage_totals,
            agent_reports=(peer.agent_reports_tools, peer.agent_reports_usage),
        )
        peer.turns[session_id] = turn
        return turn

    # ---------------------------------------------------------------- end

    def finish(self, call: Call | None, outcome: int, value: Any) -> None:
        """Annotate the span by how the call ended, end it and its turn, record its duration."""
        if call is None or call.span is None:
            return
        try:
            span = call.span
            error_type = None
            if outcome == RESULT:
                if call.is_request:
                    if call.method == sc.INITIALIZE and type(value) is dict and call.peer is not None:
                        negotiated_version(call.peer, value)
                        self._agents.identify(call.peer, value)
                    turn = call.turn
                    # A v1 turn's result (stop reason, usage) is set by the turn layer, in one batch.
                    if (turn is None or turn.own_span or self._capture) and span.is_recording():
                        self._on_result(call, value)
                    if turn is not None:
                        self._turns.take_result(turn, value)
                elif call.failure is not None:
                    error_type = call.failure
                    span.set_attribute(sc.ERROR_TYPE, call.failure)
                    span.set_status(Status(StatusCode.ERROR, f"notification handler failed: {call.failure}"))
            elif outcome == RPC_ERROR:
                code, message, data = value
                code_text = str(code)
                # A handler exception's class says more than -32603; otherwise the code is the type.
                error_type = call.failure or code_text
                if span.is_recording():
                    span.set_attribute(sc.RPC_RESPONSE_STATUS_CODE, code_text)
                    span.set_attribute(sc.ERROR_TYPE, error_type)
                    if data is not None and self._capture:
                        span.set_attribute(sc.ACP_ERROR_DATA, truncate(data, self._max_len))
                    span.set_status(Status(StatusCode.ERROR, message if type(message) is str else None))
            elif outcome == EXCEPTION:
                error_type = type(value).__qualname__
                if span.is_recording():
                    span.set_attribute(sc.ERROR_TYPE, error_type)
                    # Transport and connection errors carry no user content; handler exceptions on the
                    # server side never get here (the SDK turns them into error responses).
                    span.set_status(Status(StatusCode.ERROR, truncate(str(value), 256) or error_type))
            elif span.is_recording():
                span.set_attribute(sc.ACP_CANCELLED, True)
            self._end(call, error_type)
        except Exception:
            _log.debug("acp_otel: failed to end span", exc_info=True)
            if call.span is not None:
                span, call.span = call.span, None
                span.end()

    def _end(self, call: Call, error_type: str | None) -> None:
        span = call.span
        assert span is not None
        call.span = None  # ending twice is a no-op
        turn = call.turn
        try:
            if turn is not None:
                peer = call.peer
                if not turn.own_span:  # v1: this span is the turn
                    turn.error_type = error_type
                    turn.request = None
                    self._turns.end(turn, None, call.started is not None)
                    if peer is not None and peer.turns.get(turn.session_id) is turn:
                        del peer.turns[turn.session_id]
                elif error_type is not None:  # v2: the prompt was not accepted; the turn ends with it
                    turn.error_type = error_type
                    self._turns.end(turn)
                    if peer is not None and peer.turns.get(turn.session_id) is turn:
                        del peer.turns[turn.session_id]
        finally:  # ended even if ending its turn failed (a custom meter that raises, say): no longer on the call
            span.end()
        instruments = self._instruments
        started = call.started
        if started is not None and instruments is not None:  # the request's duration
            info = call.info
            if error_type is None:
                attributes = info.request_attributes
            else:
                attributes = instruments.request_attributes(info.metric_name, error_type)
            histogram = instruments.server_duration if call.server else instruments.client_duration
            histogram.record(self.clock() - started, attributes)

    def _on_result(self, call: Call, result: Any) -> None:
        span = call.span
        assert span is not None
        if type(result) is dict:
            if call.method == sc.INITIALIZE:
                initialize_result(span, call.peer, result)
            elif call.method == sc.SESSION_PROMPT:
                stop_reason = _str_or_none(result.get("stopReason"))
                # A v1 turn (this span) sets it with the turn's other end attributes, in one batch.
                if stop_reason is not None and (call.turn is None or call.turn.own_span):
                    span.set_attribute(sc.ACP_STOP_REASON, stop_reason)
            if call.session_id is None and call.method in _SESSION_RESULT_METHODS:
                session_id = _str_or_none(result.get("sessionId"))
                if session_id is not None:
                    span.set_attribute(sc.GEN_AI_CONVERSATION_ID, session_id)
        if self._capture and result is not None:
            span.set_attribute(sc.ACP_RESULT, truncate(result, self._max_len))

    def close_turns(self, peer: PeerState, ended_by: str, keep_requests: bool) -> None:
        """End every turn still open on a connection (see ``Engine.close_peer`` and ``Engine.shutdown``)."""
        for session_id, turn in list(peer.turns.items()):
            try:
                if turn.own_span:
                    self._turns.end(turn, ended_by)
                    peer.turns.pop(session_id, None)
                else:
                    # v1: end the tools now; the request span (the turn) ends with its request.
                    self._turns.end_tools(turn, ended_by)
                    if not keep_requests:
                        if turn.span.is_recording():
                            turn.span.set_attribute(sc.ACP_TURN_ENDED_BY, ended_by)
                        if isinstance(turn.request, Call):
                            self.finish(turn.request, EXCEPTION, ConnectionError("Connection closed"))
                        peer.turns.pop(session_id, None)
            except Exception:
                _log.debug("acp_otel: failed to end a turn", exc_info=True)
