"""The message-level tracing engine: where every ACP span is started, named, annotated and ended.

It works on plain JSON-RPC values (method names, params dicts, message dicts, error objects) and
knows nothing of the SDK's classes or of wrapt, so that the SDK adapter and a future stdio proxy are
both thin callers of it. ``peer`` is any weak-referenceable object that identifies one connection;
facts learned from ``initialize`` are kept per peer and set on that connection's later spans. The agent
level (turns, tool calls, chunk counts, metrics: ``_turns.py``, ``_metrics.py``) runs on the same messages.

Every public method is safe to call: a failure inside tracing is logged at debug level and the
application carries on as if it were not instrumented.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import _propagation as propagation
from . import _semconv as sc
from . import _w3c_fast as w3c_fast
from ._metrics import Instruments
from ._settings import Settings
from ._turns import Turn, TurnLayer, agent_attributes, truncate, update_attributes

_log = logging.getLogger("acp_otel")

# The incoming call whose handler runs in this context, so that an exception raised by the handler
# (which the SDK turns into a -32603 response) can be named on the right span. Stored as a weak
# reference: the call holds the context, so a strong one would make a cycle per message that only the
# garbage collector frees (with the span it holds); the adapter keeps the call alive while the handler runs.
_CALL_KEY = otel_context.create_key("acp_otel.incoming_call")
# Span kinds read once: an Enum member looked up on its class costs more than a Python call.
_CLIENT, _SERVER, _PRODUCER, _CONSUMER = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER

_SESSION_RESULT_METHODS = ("session/new", "session/load", "session/fork", "session/resume")

# Bounded like MethodMatcher's cache: a hostile peer can invent endless method names.
_METHOD_CACHE_SIZE = 1024
# Start attribute sets cached per connection ((method, session) pairs; more are built each time).
_BASE_CACHE_SIZE = 64

# Characters of an agent name kept in a turn span's name.
_MAX_AGENT_NAME = 128

# How a call ended (one place annotates and ends spans: Engine._finish).
_RESULT, _RPC_ERROR, _EXCEPTION, _CANCELLED = range(4)

# What a message inside a turn may hang from besides the turn (_MethodInfo.tool_link): the tool call a
# permission request names, the tool call an fs/* or terminal/* request serves.
_NO_TOOL_LINK, _PERMISSION_LINK, _SERVING_LINK = range(3)


class PeerState:
    """What one connection has told us: initialize facts, the turn in flight per session."""

    __slots__ = (
        "__weakref__",
        "agent_traced",
        "attributes",
        "base_attributes",
        "costs",
        "protocol_version",
        "ref",
        "turns",
    )

    def __init__(self, ref: weakref.ref[Any]) -> None:
        self.ref = ref  # the connection (the engine's map is keyed by its id, which may be reused)
        self.attributes: dict[str, Any] = {}
        # Engine._base_attributes per (method, session id); cleared when the facts above change.
        self.base_attributes: dict[tuple[str, str | None], dict[str, Any]] = {}
        self.turns: dict[str, Turn] = {}
        self.protocol_version: int | None = None  # negotiated in initialize (2: ACP v2 turns)
        # A session/update of the agent's arrived with trace context: the agent reports usage (see Turn).
        self.agent_traced = False
        self.costs: dict[str, tuple[float, str]] = {}  # the last cumulative cost per session (usage_update)


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
        info: _MethodInfo,
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


class _MethodInfo:
    """What depends on a method name alone, worked out once per name."""

    __slots__ = ("attributes", "inject", "is_update", "metric_name", "request_attributes", "tool_link", "traced")

    def __init__(
        self,
        attributes: dict[str, Any],
        traced: bool,
        inject: bool,
        is_update: bool,
        metric_name: str,
        request_attributes: dict[str, str],
        tool_link: int = _NO_TOOL_LINK,
    ) -> None:
        # The start attributes that depend on the name alone (copied per span, never handed out).
        self.attributes = attributes
        self.traced = traced  # not excluded by settings
        self.inject = inject  # context may be injected into outgoing messages of this method
        self.is_update = is_update
        self.metric_name = metric_name  # acp.method.name in metrics: bounded (_OTHER)
        self.request_attributes = request_attributes  # of a request-duration record without error
        self.tool_link = tool_link  # inside a turn: may hang from a tool call (_PERMISSION_LINK, _SERVING_LINK)


def _str_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def _add_update_attributes(attributes: dict[str, Any], params: Any) -> None:
    update = params.get("update") if type(params) is dict else None
    if type(update) is dict:
        update_attributes(attributes, update)


def _meta_keys(obj: Any) -> list[str]:
    if type(obj) is dict:
        meta = obj.get("_meta")
        if type(meta) is dict:
            return sorted(k for k in meta if type(k) is str)
    return []


def _has_span(ctx: Context) -> bool:
    return trace.get_current_span(ctx).get_span_context().is_valid


class _ContextFacts:
    """What the engine needs to know of one current context: whether instrumentation is enabled in it
    (``is_instrumentation_enabled``), its span and whether that span is valid.

    A ``Context`` is immutable, so these facts hold for as long as the same object is current: the
    receive loop's for every incoming message, one handler's for every message it sends. The engine
    keeps the last one per direction, which saves most of the lookups per message.
    """

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


_NO_FACTS = _ContextFacts(None)


def _permission_tool_call(params: Any) -> Any:
    """The tool call update a session/request_permission carries (v1 ``toolCall``; v2 ``subject.toolCall``)."""
    if type(params) is not dict:
        return None
    tool_call = params.get("toolCall")
    if tool_call is None:
        subject = params.get("subject")
        tool_call = subject.get("toolCall") if type(subject) is dict else None
    return tool_call


class Engine:
    """Starts and ends spans for ACP messages, moves trace context through ``params._meta`` and runs the
    agent layer (turns, tool calls, metrics) on the messages it is fed."""

    def __init__(self, tracer: trace.Tracer, settings: Settings, instruments: Instruments | None = None) -> None:
        self._tracer = tracer
        self.settings = settings
        self._instruments = instruments
        # Per-connection state lives only here (nothing is left on the peer objects), keyed by id(peer) and
        # checked against a weak reference: one C-level lookup per message, where a WeakKeyDictionary costs
        # two Python calls and a new reference. A collected peer's entry goes with it; uninstrument drops all.
        self._peers: dict[int, PeerState] = {}
        self._strip_keys = propagation.propagator_fields()
        # extra_trace_keys: written beside the reserved keys and stripped on receipt. Without them the engine
        # calls the plain functions, so the option costs nothing when off.
        extra_keys = tuple(k for k in settings.extra_trace_keys if k not in self._strip_keys)
        self._injected_keys = self._strip_keys + extra_keys
        self._inject_context: propagation.Injector = propagation.inject_context
        self._strip_and_extract: propagation.Stripper = propagation.strip_and_extract
        if extra_keys:
            self._inject_context = propagation.extra_key_injector(extra_keys)
            self._strip_and_extract = propagation.extra_key_stripper(extra_keys)
        mode = settings.notification_spans
        self._all_mode = mode == "all"
        self._events_mode = mode == "events"
        self._no_notification_spans = mode == "none"
        self._tool_spans = settings.tool_spans
        self._turns = TurnLayer(tracer, settings, instruments)
        # Per method name: name-only start attributes, exclusion, injection.
        self._methods: dict[str, _MethodInfo] = {}
        # The last current context seen by each direction, and what it says (see _ContextFacts).
        self._outgoing_facts = _NO_FACTS
        self._incoming_facts = _NO_FACTS

    @property
    def propagation_keys(self) -> tuple[str, ...]:
        """The ``_meta`` keys the configured propagator owns (the W3C three plus any it declares)."""
        return self._strip_keys

    @property
    def injected_keys(self) -> tuple[str, ...]:
        """The ``_meta`` keys outgoing messages may get: :attr:`propagation_keys` and the ``extra_trace_keys``."""
        return self._injected_keys

    # ----------------------------------------------------------------- peers

    def peer_state(self, peer: Any) -> PeerState | None:
        """The state kept for one connection (created on first use; ``None`` if ``peer`` cannot be
        weakly referenced)."""
        if peer is None:
            return None
        state = self._peers.get(id(peer))
        if state is not None and state.ref() is peer:
            return state
        key = id(peer)
        peers = self._peers

        def forget(ref: weakref.ref[Any]) -> None:
            entry = peers.get(key)
            if entry is not None and entry.ref is ref:
                del peers[key]

        try:
            state = PeerState(weakref.ref(peer, forget))
        except TypeError:  # not weak-referenceable: trace without per-connection facts
            return None
        peers[key] = state
        return state

    def close_peer(self, peer: Any, *, keep_requests: bool = False) -> None:
        """The connection is gone: end every turn and tool span still open for it.

        Tool spans and ACP v2 turn spans end with ``acp.tool_call.ended_by`` / ``acp.turn.ended_by`` =
        ``connection_closed`` (status unchanged: not an error). A v1 turn is its ``session/prompt`` span,
        which ends as a closed connection (``ConnectionError``) unless ``keep_requests`` (the SDK adapter:
        the SDK itself rejects or cancels those requests). Safe to call twice; never raises.
        """
        state = self._peers.get(id(peer)) if peer is not None else None
        if state is not None and state.ref() is peer:
            self._close_turns(state, sc.ENDED_BY_CONNECTION, keep_requests)

    def shutdown(self) -> None:
        """Uninstrumenting: end the tool calls and v2 turns still open on every connection (marked
        ``uninstrumented``) and forget every connection. A request in flight keeps its span, which its
        adapter still ends when the request does (with its v1 turn)."""
        for state in list(self._peers.values()):
            self._close_turns(state, sc.ENDED_BY_SHUTDOWN, True)
        self._peers.clear()
        self._outgoing_facts = self._incoming_facts = _NO_FACTS

    def _close_turns(self, state: PeerState, ended_by: str, keep_requests: bool) -> None:
        for session_id, turn in list(state.turns.items()):
            try:
                if turn.own_span:
                    self._turns.end(turn, ended_by)
                    state.turns.pop(session_id, None)
                else:
                    # v1: end the tools now; the request span (the turn) ends with its request.
                    self._turns.end_tools(turn, ended_by)
                    if not keep_requests:
                        if turn.span.is_recording():
                            turn.span.set_attribute(sc.ACP_TURN_ENDED_BY, ended_by)
                        if isinstance(turn.request, Call):
                            self.end_exception(turn.request, ConnectionError("Connection closed"))
                        state.turns.pop(session_id, None)
            except Exception:
                _log.debug("acp_otel: failed to end a turn", exc_info=True)

    # -------------------------------------------------------------- outgoing

    def begin_outgoing(
        self,
        peer: Any,
        method: Any,
        params: Any,
        request_id: Any = None,
        is_request: bool = True,
        *,
        parent: Context | None = None,
        sender_traced: bool | None = None,
    ) -> tuple[Call | None, Any]:
        """Start a CLIENT (request) or PRODUCER (notification) span and inject its context.

        ``parent``: the parent context (default: the current one); ``sender_traced``: ``None`` when this
        process is the sender, else whether a relayed message arrived with trace context (the proxy).
        Returns the call to end later (``None`` when nothing is traced) and the params to send.
        """
        call = None
        try:
            if type(method) is not str:
                return None, params
            current = otel_context.get_current()
            facts = self._outgoing_facts
            if facts.context is not current:
                facts = self._outgoing_facts = _ContextFacts(current)
            if not facts.enabled:
                return None, params
            info = self._methods.get(method) or self._method_info(method)
            # The span whose context goes out when this message gets no span of its own (None: look it up).
            span_out = None
            has_span: bool | None = None
            if parent is None:
                parent = current
                span_out = facts.span
                has_span = facts.traced
            wants_span = is_request or not self._no_notification_spans
            # The connection's state, then the session's turn in flight: both lookups are written out here and in
            # begin_incoming because they run for every message (peer_state() on a miss: a new connection, or
            # an id reused by another object).
            state = self._peers.get(id(peer))
            if state is None or state.ref() is not peer:
                state = self.peer_state(peer)
            turn = None
            if state is not None and state.turns and type(params) is dict:
                session_id = params.get("sessionId")
                if type(session_id) is str:
                    turn = state.turns.get(session_id)
            if turn is None:
                if sender_traced is True and info.is_update and state is not None:  # an update outside any turn
                    state.agent_traced = True
            else:
                if has_span is None:
                    has_span = _has_span(parent)
                # Most messages keep their parent: the call only when it may change.
                in_turn = (
                    parent
                    if has_span and not info.tool_link
                    else self._parent_in_turn(turn, info, params, parent, has_span, sender_traced is not True)
                )
                if info.is_update:
                    if sender_traced is True and turn.reports_usage:  # a traced agent reports usage itself
                        self._agent_traced(state, turn)
                    make_tools = self._tool_spans == "always" or (
                        self._tool_spans == "auto" and sender_traced is not True
                    )
                    tool_context = self._turns.on_update(turn, params, make_tools)
                    if tool_context is not None:
                        in_turn = tool_context
                    wants_span = self._all_mode
                if in_turn is not parent:
                    parent, span_out = in_turn, None
            if info.traced and wants_span:
                kind = _CLIENT if is_request else _PRODUCER
                call = self._start(info, method, params, request_id, state, parent, kind, is_request)
                span_out = call.span
            if not info.inject:
                return call, params
            return call, self._inject_context(params, parent, span_out)
        except Exception:
            _log.debug("acp_otel: failed to start outgoing span for %r", method, exc_info=True)
            if call is not None:  # started but not handed out: end it here, or it would stay open
                self._finish(call, _CANCELLED, None)
            return None, params

    # -------------------------------------------------------------- incoming

    def begin_incoming(self, peer: Any, message: Any, is_request: bool) -> tuple[Call | None, Any, Context]:
        """Extract the sender's context, strip it from the message and start a SERVER/CONSUMER span.

        Returns the call (``None`` when the message gets no span, or something went wrong), the message to
        hand to the handler and the context the handler must run in.
        """
        stripped = message
        try:
            # The sender's context, and whether it holds a valid span (None: look).
            stripped, carrier = self._strip_and_extract(message, self._injected_keys)
            parent, traced = propagation.extract_carrier(carrier) if carrier is not None else (Context(), False)
            # Unless the real propagators decided, the parent holds a span and baggage at most: see below.
            built_here = traced is not None
            current = otel_context.get_current()
            facts = self._incoming_facts
            if facts.context is not current:
                facts = self._incoming_facts = _ContextFacts(current)
            method = message.get("method")
            if type(method) is not str:
                method = str(method)
            params = stripped.get("params")
            state = self._peers.get(id(peer))
            if state is None or state.ref() is not peer:
                state = self.peer_state(peer)
            info = self._methods.get(method) or self._method_info(method)
            enabled = facts.enabled
            wants_span = is_request or not self._no_notification_spans
            turn = None
            if enabled and state is not None and state.turns and type(params) is dict:
                session_id = params.get("sessionId")
                if type(session_id) is str:
                    turn = state.turns.get(session_id)
            if turn is not None:
                if traced is None:
                    traced = _has_span(parent)
                if not traced:  # an untraced sender: the message belongs to the turn (or the tool it names)
                    parent = self._parent_in_turn(turn, info, params, parent, False, True)
                    built_here = False
                elif info.tool_link == _PERMISSION_LINK and self._tool_spans == "always":
                    # Tool spans on both sides: first sighting here too; the traced sender's span stays the parent.
                    self._turns.sight_tool(turn, _permission_tool_call(params), True)
                if info.is_update:
                    if traced and turn.reports_usage:  # an update of a traced agent: it reports usage itself
                        self._agent_traced(state, turn)
                    make_tools = self._tool_spans == "always" or (self._tool_spans == "auto" and not traced)
                    tool_context = self._turns.on_update(turn, params, make_tools)
                    if tool_context is not None and not traced:
                        parent = tool_context
                    wants_span = self._all_mode
            elif info.is_update and state is not None and not state.agent_traced and enabled:
                # An update outside any turn: does the agent trace itself? (Once known, never looked up again.)
                if traced if traced is not None else _has_span(parent):
                    state.agent_traced = True
            if not (info.traced and enabled and wants_span):
                return None, stripped, parent
            kind = _SERVER if is_request else _CONSUMER
            request_id = message.get("id") if is_request else None
            call = self._start(info, method, params, request_id, state, parent, kind, is_request)
            # Baggage and the remote parent stay current for the handler, under our span.
            # What set_span_in_context and then set_value give, built in one go.
            context = Context({**parent, w3c_fast.SPAN_KEY: call.span, _CALL_KEY: weakref.ref(call)})
            if built_here and is_request:
                # The handler sends from this context (its notifications, its requests to the peer): what
                # is_instrumentation_enabled() says there is known, since nothing but spans, baggage and our
                # call were put into an empty context, so the first message it sends skips the lookups.
                self._outgoing_facts = _ContextFacts(context, call.span)
            return call, stripped, context
        except Exception:
            _log.debug("acp_otel: failed to start incoming span", exc_info=True)
            return None, stripped, Context()

    def _parent_in_turn(
        self, turn: Turn, info: _MethodInfo, params: Any, parent: Context, traced: bool, closest: bool
    ) -> Context:
        """A message of a session with a turn in flight: a permission request goes under the tool call it names
        (opening that tool call's span when this is its first sighting and this side makes tool spans:
        ``closest``, no traced process nearer the agent); an ``fs/*`` / ``terminal/*`` request that would hang
        from the turn (or from nothing) goes under the tool call it serves; a message without a span to hang
        from (``traced`` false) goes under the turn."""
        link = info.tool_link
        if link == _PERMISSION_LINK:
            mode = self._tool_spans
            make_tools = mode == "always" or (mode == "auto" and closest)
            tool_context = self._turns.sight_tool(turn, _permission_tool_call(params), make_tools)
            if tool_context is not None:
                return tool_context
        elif link == _SERVING_LINK and (not traced or trace.get_current_span(parent) is turn.span):
            # A span the application opened itself (or the traced agent's, relayed) is kept.
            tool_context = turn.served_tool_context(params)
            if tool_context is not None:
                return tool_context
        return parent if traced else turn.context

    def _start(
        self,
        info: _MethodInfo,
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
            _add_update_attributes(attributes, params)
        turn = None
        turn_peer = peer if method == sc.SESSION_PROMPT else None  # a session/prompt starts a turn
        if turn_peer is not None and session_id is not None and (turn_peer.protocol_version or 0) >= 2:
            # ACP v2: the turn is a span of its own; the request span stands for the acceptance only.
            turn = self._start_turn(turn_peer, session_id, None, parent, params)
            if kind is _CLIENT:  # the sender's turn wraps its request (one trace)
                parent = turn.context
        name = method
        if turn_peer is not None and turn is None and session_id is not None:
            # A v1 turn: named like MCP names its calls, "{method} {target}" (the agent), so that trace lists
            # tell agents apart; the method stays first, as this span is also the request's.
            agent = turn_peer.attributes.get(sc.ACP_AGENT_NAME)
            if type(agent) is str and agent:
                name = f"{method} {agent[:_MAX_AGENT_NAME]}"
        span = self._tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        try:
            call = Call(span, method, peer, is_request, info, session_id, kind is _SERVER)
            if turn_peer is not None and session_id is not None:
                if turn is None:  # v1: the request span is the turn
                    turn = self._start_turn(turn_peer, session_id, span, parent, params)
                    turn.request = call
                call.turn = turn
            instruments = self._instruments
            if instruments is not None and is_request and instruments.recording():
                # A v1 turn and its request start together: one clock read for both.
                call.started = turn.started if turn is not None and not turn.own_span else time.monotonic()
            if (method == sc.INITIALIZE or self.settings.capture_content) and span.is_recording():
                self._on_params(call, params)
            return call
        except BaseException:
            span.end()  # not handed out: it would stay open
            if turn is not None and turn.own_span:
                self._turns.end(turn)
            raise

    def _base_attributes(
        self, info: _MethodInfo, method: str, session_id: str | None, peer: PeerState | None
    ) -> dict[str, Any]:
        """Build the start attributes that depend on the method, session and connection only, and cache them
        per connection (until it learns more in ``initialize``): ``_start`` looks in that cache first. Shared:
        callers copy before changing them."""
        cache = peer.base_attributes if peer is not None else None
        attributes = info.attributes.copy()
        if peer is not None:
            attributes.update(peer.attributes)
            if method == sc.SESSION_PROMPT:
                if (peer.protocol_version or 0) >= 2:
                    attributes.pop(sc.GEN_AI_OPERATION_NAME, None)  # the v2 turn span carries it
                else:
                    agent_attributes(attributes, peer.attributes)
        if session_id is not None:
            attributes[sc.ACP_SESSION_ID] = session_id
            if sc.GEN_AI_OPERATION_NAME in attributes:  # a GenAI attribute, on GenAI operations (turns) only
                attributes[sc.GEN_AI_CONVERSATION_ID] = session_id
        if cache is not None and len(cache) < _BASE_CACHE_SIZE:
            cache[(method, session_id)] = attributes
        return attributes

    def _agent_traced(self, peer: PeerState | None, turn: Turn) -> None:
        if peer is not None:
            peer.agent_traced = True
        self._turns.agent_traced(turn)

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
        )
        peer.turns[session_id] = turn
        return turn

    def note_handler_exception(self, exc: BaseException, rpc_code: Any = None) -> None:
        """Name the exception a handler raised on the current incoming span (the SDK hides it).

        ``rpc_code`` is the JSON-RPC code when the handler raised the SDK's ``RequestError``.
        """
        try:
            ref = otel_context.get_value(_CALL_KEY)
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
            if call.failure is not None and self.settings.capture_content:
                call.span.set_attribute(
                    sc.ACP_ERROR_DETAIL, truncate(str(exc), self.settings.capture_content_max_length)
                )
        except Exception:
            _log.debug("acp_otel: failed to record handler exception", exc_info=True)

    # ---------------------------------------------------------------- ending

    def end_result(self, call: Call | None, result: Any) -> None:
        """End a call that succeeded with ``result`` (``None`` for notifications)."""
        self._finish(call, _RESULT, result)

    def end_payload(self, call: Call | None, payload: Any) -> None:
        """End an incoming request from the response payload the SDK is about to send."""
        if type(payload) is dict and "error" in payload:
            error = payload.get("error")
            if type(error) is dict:
                self._finish(call, _RPC_ERROR, (error.get("code"), error.get("message"), error.get("data")))
                return
        self._finish(call, _RESULT, payload.get("result") if type(payload) is dict else None)

    def end_rpc_error(self, call: Call | None, code: Any, message: Any, data: Any = None) -> None:
        """End a call that got (or answered with) a JSON-RPC error object."""
        self._finish(call, _RPC_ERROR, (code, message, data))

    def end_cancelled(self, call: Call | None) -> None:
        """End a call whose caller (or handler task) was cancelled: not an error, marked as cancelled."""
        self._finish(call, _CANCELLED, None)

    def end_exception(self, call: Call | None, exc: BaseException) -> None:
        """End a call that raised a plain exception (transport failure, closed connection, ...)."""
        self._finish(call, _EXCEPTION, exc)

    def _finish(self, call: Call | None, outcome: int, value: Any) -> None:
        """Annotate the span by how the call ended, end it and its turn, record its duration."""
        if call is None or call.span is None:
            return
        try:
            span = call.span
            error_type = None
            if outcome == _RESULT:
                if call.is_request:
                    if call.method == sc.INITIALIZE and type(value) is dict and call.peer is not None:
                        version = value.get("protocolVersion")
                        if type(version) is int:  # the negotiated version: 2 means ACP v2 turns
                            call.peer.protocol_version = version
                            call.peer.base_attributes.clear()
                    turn = call.turn
                    # A v1 turn's result (stop reason, usage) is set by the turn layer, in one batch.
                    if (turn is None or turn.own_span or self.settings.capture_content) and span.is_recording():
                        self._on_result(call, value)
                    if turn is not None:
                        self._turns.take_result(turn, value)
                elif call.failure is not None:
                    error_type = call.failure
                    span.set_attribute(sc.ERROR_TYPE, call.failure)
                    span.set_status(Status(StatusCode.ERROR, f"notification handler failed: {call.failure}"))
            elif outcome == _RPC_ERROR:
                code, message, data = value
                code_text = str(code)
                # A handler exception's class says more than -32603; otherwise the code is the type.
                error_type = call.failure or code_text
                if span.is_recording():
                    span.set_attribute(sc.RPC_RESPONSE_STATUS_CODE, code_text)
                    span.set_attribute(sc.ERROR_TYPE, error_type)
                    if data is not None and self.settings.capture_content:
                        span.set_attribute(sc.ACP_ERROR_DATA, truncate(data, self.settings.capture_content_max_length))
                    span.set_status(Status(StatusCode.ERROR, message if type(message) is str else None))
            elif outcome == _EXCEPTION:
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
            histogram.record(time.monotonic() - started, attributes)

    def _method_info(self, method: str) -> _MethodInfo:
        """Work out (and cache) what depends on the method name; callers looked in the cache first."""
        settings = self.settings
        attributes: dict[str, Any] = {sc.RPC_SYSTEM_NAME: sc.RPC_SYSTEM_VALUE, sc.ACP_METHOD_NAME: method}
        if sc.is_extension(method):
            attributes[sc.ACP_EXTENSION] = True
            namespace = sc.extension_namespace(method)
            if namespace is not None:
                attributes[sc.ACP_EXTENSION_NAMESPACE] = namespace
        if method == sc.SESSION_PROMPT:
            attributes[sc.GEN_AI_OPERATION_NAME] = sc.INVOKE_AGENT
        if method == sc.SESSION_REQUEST_PERMISSION:
            tool_link = _PERMISSION_LINK
        elif method.startswith(sc.TOOL_SERVING_PREFIXES):
            tool_link = _SERVING_LINK
        else:
            tool_link = _NO_TOOL_LINK
        inject = settings.inject and not sc.is_protocol_method(method)
        inject = inject and not settings.inject_excluded_methods(method)
        instruments = self._instruments
        metric_name = instruments.method_name(method) if instruments is not None else method
        info = _MethodInfo(
            attributes,
            traced=not settings.excluded_methods(method),
            inject=bool(inject),
            is_update=method == sc.SESSION_UPDATE,
            metric_name=metric_name,
            request_attributes=instruments.request_attributes(metric_name, None) if instruments is not None else {},
            tool_link=tool_link,
        )
        if len(self._methods) < _METHOD_CACHE_SIZE:
            self._methods[method] = info
        return info

    def _on_params(self, call: Call, params: Any) -> None:
        span = call.span
        assert span is not None
        if call.method == sc.INITIALIZE and type(params) is dict:
            self._initialize_params(call, params)
        if self.settings.capture_content and params is not None:
            span.set_attribute(sc.ACP_PARAMS, truncate(params, self.settings.capture_content_max_length))

    def _initialize_params(self, call: Call, params: dict[str, Any]) -> None:
        self._initialize_facts(call, params, "clientInfo", sc.ACP_CLIENT_NAME, sc.ACP_CLIENT_VERSION)
        self._declared_extensions(call, params.get("clientCapabilities"), sc.ACP_CLIENT_CAPABILITIES_EXTENSIONS)

    def _initialize_result(self, call: Call, result: dict[str, Any]) -> None:
        self._initialize_facts(call, result, "agentInfo", sc.ACP_AGENT_NAME, sc.ACP_AGENT_VERSION)
        self._declared_extensions(call, result.get("agentCapabilities"), sc.ACP_AGENT_CAPABILITIES_EXTENSIONS)

    def _initialize_facts(
        self, call: Call, obj: dict[str, Any], info_key: str, name_attr: str, version_attr: str
    ) -> None:
        """Protocol version on the span; the side's name/version on the span and the connection's later spans."""
        assert call.span is not None
        version = obj.get("protocolVersion")
        if type(version) is int:
            call.span.set_attribute(sc.ACP_PROTOCOL_VERSION, version)
        info = obj.get(info_key)
        if info is None:
            info = obj.get("info")  # ACP v2 names both sides' Implementation "info"
        facts = {}
        if type(info) is dict:
            for attr, key in ((name_attr, "name"), (version_attr, "version")):
                value = _str_or_none(info.get(key))
                if value is not None:
                    facts[attr] = value
        self._remember(call, facts)

    def _declared_extensions(self, call: Call, capabilities: Any, attr: str) -> None:
        assert call.span is not None
        extensions = _meta_keys(capabilities)
        if extensions:
            call.span.set_attribute(attr, extensions)

    def _remember(self, call: Call, facts: Mapping[str, Any]) -> None:
        if not facts:
            return
        assert call.span is not None
        call.span.set_attributes(facts)
        if call.peer is not None:
            call.peer.attributes.update(facts)
            call.peer.base_attributes.clear()

    def _on_result(self, call: Call, result: Any) -> None:
        span = call.span
        assert span is not None
        if type(result) is dict:
            if call.method == sc.INITIALIZE:
                self._initialize_result(call, result)
            elif call.method == sc.SESSION_PROMPT:
                stop_reason = _str_or_none(result.get("stopReason"))
                # A v1 turn (this span) sets it with the turn's other end attributes, in one batch.
                if stop_reason is not None and (call.turn is None or call.turn.own_span):
                    span.set_attribute(sc.ACP_STOP_REASON, stop_reason)
            if call.session_id is None and call.method in _SESSION_RESULT_METHODS:
                session_id = _str_or_none(result.get("sessionId"))
                if session_id is not None:
                    span.set_attribute(sc.ACP_SESSION_ID, session_id)
        if self.settings.capture_content and result is not None:
            span.set_attribute(sc.ACP_RESULT, truncate(result, self.settings.capture_content_max_length))

    # ------------------------------------------------- connection facts (remote transports)

    def note_connection_facts(self, peer: Any, facts: Mapping[str, Any]) -> None:
        """Facts about the connection itself (its id, the peer's address): on its spans from now on.

        The adapter of a remote transport learns them when the connection is made (or when its
        ``initialize`` completes); they join the ``initialize`` facts, never the metrics.
        """
        state = self.peer_state(peer)
        if state is not None and facts:
            state.attributes.update(facts)
            state.base_attributes.clear()
