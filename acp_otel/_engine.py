"""The message-level tracing engine: the adapters' entry points, for every ACP message in either direction.

It works on plain JSON-RPC values (method names, params dicts, message dicts, error objects) and knows nothing
of the SDK's classes or of wrapt, so that the SDK adapter and the stdio proxy are both thin callers of it.
``peer`` is any weak-referenceable object that identifies one connection.

:meth:`Engine.begin_outgoing` and :meth:`Engine.begin_incoming` take a message from its current context to its
span: the context facts (:mod:`._context_facts`), the connection (:mod:`._connection`), what the method name
says (:mod:`._methods`), the session's turn, which is handed the message once (:meth:`._turns.TurnLayer.route`),
and its span (:mod:`._message_spans`, which also ends it: ``end_*``). Trace context moves through ``params._meta``
(:mod:`._propagation`).

Every public method is safe to call: a failure inside tracing is logged at debug level and the
application carries on as if it were not instrumented.
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

from . import _otel_private as otel_private
from . import _propagation as propagation
from ._agent_identity import AgentIdentity
from ._connection import PeerRegistry, PeerState
from ._context_facts import ContextFacts, DirectionFacts
from ._engine_connections import ConnectionEntryPoints
from ._message_spans import (
    CALL_KEY,
    CANCELLED,
    CLIENT,
    CONSUMER,
    EXCEPTION,
    PRODUCER,
    RESULT,
    RPC_ERROR,
    SERVER,
    Call,
    MessageSpans,
    note_handler_exception,
)
from ._methods import MethodTable
from ._metrics import Instruments
from ._settings import Settings
from ._turns import TurnLayer

__all__ = ["Call", "Engine", "PeerState"]

_log = logging.getLogger("acp_otel")

# Read once (module constants, not attribute lookups per message): see _otel_private.
_SPAN_KEY = otel_private.SPAN_KEY
_DIRECT_CONTEXTS = otel_private.DIRECT_CONTEXTS


def _has_span(ctx: Context) -> bool:
    return trace.get_current_span(ctx).get_span_context().is_valid


class Engine(ConnectionEntryPoints):
    """Starts and ends spans for ACP messages, moves trace context through ``params._meta`` and runs the
    agent layer (turns, tool calls, metrics) on the messages it is fed. The entry points about a whole
    connection (its facts, its agent, its end) are :class:`~acp_otel._engine_connections.ConnectionEntryPoints`."""

    def __init__(self, tracer: trace.Tracer, settings: Settings, instruments: Instruments | None = None) -> None:
        self.settings = settings
        self._connections = PeerRegistry()
        # Read inline per message (see PeerRegistry); the registry creates a state on a miss.
        self._peers = self._connections.by_id
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
        self._no_notification_spans = settings.notification_spans == "none"
        self._turns = TurnLayer(tracer, settings, instruments)
        self._update_spans = self._turns.update_spans
        self._agents = AgentIdentity(settings)
        self._spans = MessageSpans(tracer, settings, instruments, self._turns, self._agents)
        # Called as self._spans.start(...): a bound method kept on the instance is not specialized by
        # CPython 3.11 (LOAD_METHOD on an instance attribute), about 200 instructions more per call.
        self._method_table = MethodTable(settings, instruments)
        self._methods = self._method_table.cache  # read inline per message; the table's info() on a miss
        self._facts = DirectionFacts()

    def use_clock(self, clock: Callable[[], float] | None) -> None:
        """Measure request durations with ``clock`` (a monotonic clock in seconds; ``None``: ``time.monotonic``).
        The proxy traces the lines it relayed before the engine existed with the times they were relayed."""
        self._spans.clock = clock or time.monotonic

    @property
    def propagation_keys(self) -> tuple[str, ...]:
        """The ``_meta`` keys the configured propagator owns (the W3C three plus any it declares)."""
        return self._strip_keys

    @property
    def injected_keys(self) -> tuple[str, ...]:
        """The ``_meta`` keys outgoing messages may get: :attr:`propagation_keys` and the ``extra_trace_keys``."""
        return self._injected_keys

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
            facts = self._facts.outgoing
            if facts.context is not current:
                facts = self._facts.outgoing = ContextFacts(current)
            if not facts.enabled:
                return None, params
            info = self._methods.get(method) or self._method_table.info(method)
            # The span whose context goes out when this message gets no span of its own (None: look it up).
            span_out = None
            has_span: bool | None = None
            if parent is None:
                parent = current
                span_out = facts.span
                has_span = facts.traced
            wants_span = is_request or not self._no_notification_spans
            # The connection's state, then the session's turn in flight: both lookups are written out here and in
            # begin_incoming because they run for every message (the registry on a miss: a new connection, or
            # an id reused by another object).
            state = self._peers.get(id(peer))
            if state is None or state.ref() is not peer:
                state = self._connections.state(peer)
            origin_traced = sender_traced is True  # a relayed message that arrived traced (the proxy)
            if origin_traced and info.is_update and state is not None:  # the agent traces itself
                state.agent_traced = True
            if state is not None and state.turns and type(params) is dict:
                session_id = params.get("sessionId")
                turn = state.turns.get(session_id) if type(session_id) is str else None
                if turn is not None:
                    if has_span is None:
                        has_span = _has_span(parent)
                    in_turn = self._turns.route(turn, info.turn_role, params, parent, has_span, True, origin_traced)
                    if info.is_update:
                        wants_span = self._update_spans
                    if in_turn is not parent:
                        parent, span_out = in_turn, None
            if info.traced and wants_span:
                kind = CLIENT if is_request else PRODUCER
                call = self._spans.start(info, method, params, request_id, state, parent, kind, is_request)
                span_out = call.span
            if not info.inject:
                return call, params
            return call, self._inject_context(params, parent, span_out)
        except Exception:
            _log.debug("acp_otel: failed to start outgoing span for %r", method, exc_info=True)
            if call is not None:  # started but not handed out: end it here, or it would stay open
                self._spans.finish(call, CANCELLED, None)
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
            facts = self._facts.incoming
            if facts.context is not current:
                facts = self._facts.incoming = ContextFacts(current)
            method = message.get("method")
            if type(method) is not str:
                method = str(method)
            params = stripped.get("params")
            state = self._peers.get(id(peer))
            if state is None or state.ref() is not peer:
                state = self._connections.state(peer)
            info = self._methods.get(method) or self._method_table.info(method)
            enabled = facts.enabled
            wants_span = is_request or not self._no_notification_spans
            if enabled and state is not None:
                if state.turns and type(params) is dict:
                    session_id = params.get("sessionId")
                    turn = state.turns.get(session_id) if type(session_id) is str else None
                    if turn is not None:
                        if traced is None:
                            traced = _has_span(parent)
                        in_turn = self._turns.route(turn, info.turn_role, params, parent, traced, False, traced)
                        if info.is_update:
                            wants_span = self._update_spans
                        if in_turn is not parent:  # an untraced sender: under the turn (or the tool it names)
                            parent, built_here = in_turn, False
                if info.is_update and not state.agent_traced:
                    # Does the agent trace itself? (Once known, never looked up again.)
                    if traced if traced is not None else _has_span(parent):
                        state.agent_traced = True
            if not (info.traced and enabled and wants_span):
                return None, stripped, parent
            kind = SERVER if is_request else CONSUMER
            request_id = message.get("id") if is_request else None
            call = self._spans.start(info, method, params, request_id, state, parent, kind, is_request)
            # Baggage and the remote parent stay current for the handler, under our span.
            # What set_span_in_context and then set_value give, built in one go where the API allows it.
            span = call.span
            if _DIRECT_CONTEXTS or span is None:
                context = Context({**parent, _SPAN_KEY: span, CALL_KEY: weakref.ref(call)})
            else:
                context = otel_private.context_with(parent, span, CALL_KEY, weakref.ref(call))
            if built_here and is_request:
                # The handler sends from this context (its notifications, its requests to the peer): what
                # is_instrumentation_enabled() says there is known, since nothing but spans, baggage and our
                # call were put into an empty context, so the first message it sends skips the lookups.
                self._facts.outgoing = ContextFacts(context, span)
            return call, stripped, context
        except Exception:
            _log.debug("acp_otel: failed to start incoming span", exc_info=True)
            return None, stripped, Context()

    # ---------------------------------------------------------------- ending

    def note_handler_exception(self, exc: BaseException, rpc_code: Any = None) -> None:
        """Name the exception a handler raised on the current incoming span (the SDK hides it).

        ``rpc_code`` is the JSON-RPC code when the handler raised the SDK's ``RequestError``.
        """
        note_handler_exception(exc, rpc_code, self.settings)

    def end_result(self, call: Call | None, result: Any) -> None:
        """End a call that succeeded with ``result`` (``None`` for notifications)."""
        self._spans.finish(call, RESULT, result)

    def end_payload(self, call: Call | None, payload: Any) -> None:
        """End an incoming request from the response payload the SDK is about to send."""
        if type(payload) is dict and "error" in payload:
            error = payload.get("error")
            if type(error) is dict:
                self._spans.finish(call, RPC_ERROR, (error.get("code"), error.get("message"), error.get("data")))
                return
        self._spans.finish(call, RESULT, payload.get("result") if type(payload) is dict else None)

    def end_rpc_error(self, call: Call | None, code: Any, message: Any, data: Any = None) -> None:
        """End a call that got (or answered with) a JSON-RPC error object."""
        self._spans.finish(call, RPC_ERROR, (code, message, data))

    def end_cancelled(self, call: Call | None) -> None:
        """End a call whose caller (or handler task) was cancelled: not an error, marked as cancelled."""
        self._spans.finish(call, CANCELLED, None)

    def end_exception(self, call: Call | None, exc: BaseException) -> None:
        """End a call that raised a plain exception (transport failure, closed connection, ...)."""
        self._spans.finish(call, EXCEPTION, exc)
