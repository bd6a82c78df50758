"""The message-level tracing engine: where every ACP span is started, named, annotated and ended.

It works on plain JSON-RPC values (method names, params dicts, message dicts, error objects) and
knows nothing of the SDK's classes or of wrapt, so that the SDK adapter and a future stdio proxy are
both thin callers of it. ``peer`` is any weak-referenceable object that identifies one connection;
facts learned from ``initialize`` are kept per peer and set on that connection's later spans.

Every public method is safe to call: a failure inside tracing is logged at debug level and the
application carries on as if it were not instrumented.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import propagation
from . import semconv as sc
from .settings import Settings

try:  # the keys is_instrumentation_enabled() reads, to check them in a context we already hold
    from opentelemetry.instrumentation.utils import (
        _SUPPRESS_INSTRUMENTATION_KEY,
        _SUPPRESS_INSTRUMENTATION_KEY_PLAIN,
    )
except ImportError:  # pragma: no cover - other opentelemetry-instrumentation versions

    def _instrumentation_enabled(ctx: Context) -> bool:
        return is_instrumentation_enabled()

else:

    def _instrumentation_enabled(ctx: Context) -> bool:
        return not (ctx.get(_SUPPRESS_INSTRUMENTATION_KEY) or ctx.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN))


_log = logging.getLogger("acp_otel")

# The incoming call whose handler runs in this context, so that an exception raised by the handler
# (which the SDK turns into a -32603 response) can be named on the right span.
_CALL_KEY = otel_context.create_key("acp_otel.incoming_call")

# The key trace.set_span_in_context() stores the span under (found through the public API), so that a
# context holding our span and other values is built as one Context instead of a chain of copies.
_SPAN_KEY = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))

_SESSION_RESULT_METHODS = ("session/new", "session/load", "session/fork", "session/resume")

# Bounded like MethodMatcher's cache: a hostile peer can invent endless method names.
_METHOD_CACHE_SIZE = 1024

_engine_ids = itertools.count()


class PeerState:
    """What one connection has told us: initialize facts, in-flight prompt spans per session."""

    __slots__ = ("__weakref__", "attributes", "prompts")

    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}
        self.prompts: dict[str, Call] = {}


class Call:
    """One traced message: its span (or ``None`` when excluded) and what ending it needs to know."""

    __slots__ = (
        "context",
        "dropped",
        "events",
        "failure",
        "is_request",
        "method",
        "peer",
        "session_id",
        "span",
    )

    def __init__(self, span: Span | None, method: str, peer: PeerState | None, is_request: bool) -> None:
        self.span = span
        self.method = method
        self.peer = peer
        self.is_request = is_request
        self.session_id: str | None = None
        # The context an incoming handler runs in (extracted parent, our span, baggage).
        self.context: Context | None = None
        self.events = 0
        self.dropped = 0
        # error.type of an exception the handler raised (set by note_handler_exception).
        self.failure: str | None = None


class _MethodInfo:
    """What depends on a method name alone, worked out once per name."""

    __slots__ = ("attributes", "inject", "is_update", "span_name", "traced")

    def __init__(self, span_name: str, attributes: dict[str, Any], traced: bool, inject: bool, is_update: bool) -> None:
        self.span_name = span_name
        # The start attributes that depend on the name alone (copied per span, never handed out).
        self.attributes = attributes
        self.traced = traced  # not excluded by settings
        self.inject = inject  # context may be injected into outgoing messages of this method
        self.is_update = is_update


def _truncate(value: Any, limit: int) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        text = repr(value)
    return text if len(text) <= limit else text[:limit]


def _str_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def _add_update_attributes(attributes: dict[str, Any], params: Any) -> None:
    """Add a session/update's kind and tool call id/status (no content) to ``attributes``."""
    update = params.get("update") if type(params) is dict else None
    if type(update) is dict:
        kind = update.get("sessionUpdate")
        if type(kind) is str:
            attributes[sc.ACP_SESSION_UPDATE] = kind
        tool_call_id = update.get("toolCallId")
        if type(tool_call_id) is str:
            attributes[sc.ACP_TOOL_CALL_ID] = tool_call_id
            status = update.get("status")
            if type(status) is str:
                attributes[sc.ACP_TOOL_CALL_STATUS] = status


def _meta_keys(obj: Any) -> list[str]:
    if type(obj) is dict:
        meta = obj.get("_meta")
        if type(meta) is dict:
            return sorted(k for k in meta if type(k) is str)
    return []


class Engine:
    """Starts and ends spans for ACP messages and moves trace context through ``params._meta``."""

    def __init__(self, tracer: trace.Tracer, settings: Settings) -> None:
        self._tracer = tracer
        self.settings = settings
        self._peers: weakref.WeakKeyDictionary[Any, PeerState] = weakref.WeakKeyDictionary()
        # A peer's state is also cached in its own __dict__ under a name unique to this engine, so the
        # per-message lookup needs no weakref (the WeakKeyDictionary keeps the states for counting).
        self._peer_attr = f"_acp_otel_peer_{next(_engine_ids)}"
        self._strip_keys = propagation.propagator_fields()
        self._events_mode = settings.notification_spans == "events"
        self._no_notification_spans = settings.notification_spans == "none"
        # Per method name: span name, name-only start attributes, exclusion, injection.
        self._methods: dict[str, _MethodInfo] = {}

    # ----------------------------------------------------------------- peers

    def peer_state(self, peer: Any) -> PeerState | None:
        """The state kept for one connection (created on first use)."""
        if peer is None:
            return None
        try:
            cache = peer.__dict__
        except AttributeError:
            cache = None
        if type(cache) is dict:
            state = cache.get(self._peer_attr)
            if state is not None:
                return state
        try:
            state = self._peers.get(peer)
            if state is None:
                state = self._peers[peer] = PeerState()
        except TypeError:  # not weak-referenceable: trace without per-connection facts
            return None
        if type(cache) is dict:
            cache[self._peer_attr] = state
        return state

    def shutdown(self) -> None:
        """Forget every connection, removing what ``peer_state`` cached on it (called by ``uninstrument()``)."""
        for peer in list(self._peers.keys()):
            with contextlib.suppress(Exception):
                peer.__dict__.pop(self._peer_attr, None)
        self._peers.clear()

    def open_prompt_count(self) -> int:
        """How many prompt spans are registered for session/update events (for leak checks)."""
        return sum(len(p.prompts) for p in list(self._peers.values()))

    # -------------------------------------------------------------- outgoing

    def begin_outgoing(
        self, peer: Any, method: Any, params: Any, request_id: Any = None, is_request: bool = True
    ) -> tuple[Call | None, Any]:
        """Start a CLIENT (request) or PRODUCER (notification) span and inject its context.

        Returns the call to end later (``None`` when nothing is traced) and the params to send.
        """
        call = None
        try:
            if type(method) is not str:
                return None, params
            current = otel_context.get_current()
            if not _instrumentation_enabled(current):
                return None, params
            info = self._methods.get(method) or self._method_info(method)
            peer_state = self.peer_state(peer)
            if info.traced and (is_request or self._wants_notification_span(info, peer_state, params)):
                kind = SpanKind.CLIENT if is_request else SpanKind.PRODUCER
                call = self._start(info, method, params, request_id, peer_state, current, kind, is_request)
            if not info.inject:
                return call, params
            if call is not None:
                current = Context({**current, _SPAN_KEY: call.span})
            return call, propagation.inject_into_params(params, propagation.carrier_for(current))
        except Exception:
            _log.debug("acp_otel: failed to start outgoing span for %r", method, exc_info=True)
            if call is not None:  # started but not handed out: end it here, or it would stay open
                self._end_quietly(call)
            return None, params

    # -------------------------------------------------------------- incoming

    def begin_incoming(self, peer: Any, message: Any, is_request: bool) -> tuple[Call | None, Any]:
        """Extract the sender's context, strip it from the message and start a SERVER/CONSUMER span.

        Returns the call (whose ``context`` the handler must run in; ``None`` only when something went
        wrong) and the message to hand to the handler.
        """
        stripped = message
        try:
            stripped, carrier = propagation.strip_and_extract(message, self._strip_keys)
            parent = propagation.context_from_carrier(carrier)
            method = message.get("method")
            if type(method) is not str:
                method = str(method)
            params = stripped.get("params")
            peer_state = self.peer_state(peer)
            info = self._methods.get(method) or self._method_info(method)
            if (
                info.traced
                and _instrumentation_enabled(otel_context.get_current())
                and (is_request or self._wants_notification_span(info, peer_state, params))
            ):
                kind = SpanKind.SERVER if is_request else SpanKind.CONSUMER
                request_id = message.get("id") if is_request else None
                call = self._start(info, method, params, request_id, peer_state, parent, kind, is_request)
                # Baggage and the remote parent stay current for the handler, under our span.
                call.context = Context({**parent, _SPAN_KEY: call.span, _CALL_KEY: call})
            else:
                call = Call(None, method, peer_state, is_request)
                call.context = parent
            return call, stripped
        except Exception:
            _log.debug("acp_otel: failed to start incoming span", exc_info=True)
            return None, stripped

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
        attributes = self._start_attributes(info, params, request_id, peer)
        span = self._tracer.start_span(info.span_name, context=parent, kind=kind, attributes=attributes)
        call = Call(span, method, peer, is_request)
        call.session_id = attributes.get(sc.ACP_SESSION_ID)
        if span.is_recording():
            self._on_params(call, params)
        return call

    def note_handler_exception(self, exc: BaseException, rpc_code: Any = None) -> None:
        """Name the exception a handler raised on the current incoming span (the SDK hides it).

        ``rpc_code`` is the JSON-RPC code when the handler raised the SDK's ``RequestError``.
        """
        try:
            call = otel_context.get_value(_CALL_KEY)
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
                    sc.ACP_ERROR_DETAIL, _truncate(str(exc), self.settings.capture_content_max_length)
                )
        except Exception:
            _log.debug("acp_otel: failed to record handler exception", exc_info=True)

    # ---------------------------------------------------------------- ending

    def end_result(self, call: Call | None, result: Any) -> None:
        """End a call that succeeded with ``result`` (``None`` for notifications)."""
        if call is None or call.span is None:
            return
        try:
            span = call.span
            if span.is_recording():
                if call.is_request:
                    self._on_result(call, result)
                elif call.failure is not None:
                    span.set_attribute(sc.ERROR_TYPE, call.failure)
                    span.set_status(Status(StatusCode.ERROR, f"notification handler failed: {call.failure}"))
            self._end(call)
        except Exception:
            _log.debug("acp_otel: failed to end span", exc_info=True)

    def end_payload(self, call: Call | None, payload: Any) -> None:
        """End an incoming request from the response payload the SDK is about to send."""
        if call is None or call.span is None:
            return
        if type(payload) is dict and "error" in payload:
            error = payload.get("error")
            if type(error) is dict:
                self.end_rpc_error(call, error.get("code"), error.get("message"), error.get("data"))
                return
        self.end_result(call, payload.get("result") if type(payload) is dict else None)

    def end_rpc_error(self, call: Call | None, code: Any, message: Any, data: Any = None) -> None:
        """End a call that got (or answered with) a JSON-RPC error object."""
        if call is None or call.span is None:
            return
        try:
            span = call.span
            if span.is_recording():
                code_text = str(code)
                span.set_attribute(sc.RPC_RESPONSE_STATUS_CODE, code_text)
                # A handler exception's class says more than -32603; otherwise the code is the type.
                span.set_attribute(sc.ERROR_TYPE, call.failure or code_text)
                if data is not None and self.settings.capture_content:
                    span.set_attribute(sc.ACP_ERROR_DATA, _truncate(data, self.settings.capture_content_max_length))
                description = message if type(message) is str else None
                span.set_status(Status(StatusCode.ERROR, description))
            self._end(call)
        except Exception:
            _log.debug("acp_otel: failed to end span", exc_info=True)

    def end_cancelled(self, call: Call | None) -> None:
        """End a call whose caller (or handler task) was cancelled: not an error, marked as cancelled."""
        if call is None or call.span is None:
            return
        try:
            if call.span.is_recording():
                call.span.set_attribute(sc.ACP_CANCELLED, True)
            self._end(call)
        except Exception:
            _log.debug("acp_otel: failed to end span", exc_info=True)

    def end_exception(self, call: Call | None, exc: BaseException) -> None:
        """End a call that raised a plain exception (transport failure, closed connection, ...)."""
        if call is None or call.span is None:
            return
        try:
            span = call.span
            if span.is_recording():
                span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
                # Transport and connection errors carry no user content; handler exceptions on the
                # server side never get here (the SDK turns them into error responses).
                span.set_status(Status(StatusCode.ERROR, _truncate(str(exc), 256) or type(exc).__qualname__))
            self._end(call)
        except Exception:
            _log.debug("acp_otel: failed to end span", exc_info=True)

    # --------------------------------------------------------------- helpers

    def _end_quietly(self, call: Call) -> None:
        try:
            self._end(call)
        except Exception:
            _log.debug("acp_otel: failed to end span", exc_info=True)

    def _end(self, call: Call) -> None:
        span = call.span
        if span is None:
            return
        peer = call.peer
        if peer is not None and call.method == sc.SESSION_PROMPT and call.session_id is not None:
            if peer.prompts.get(call.session_id) is call:
                del peer.prompts[call.session_id]
            if call.events or call.dropped:
                span.set_attribute(sc.ACP_SESSION_UPDATE_COUNT, call.events + call.dropped)
                if call.dropped:
                    span.set_attribute(sc.ACP_SESSION_UPDATE_DROPPED, call.dropped)
        call.span = None  # ending twice is a no-op
        span.end()

    def _method_info(self, method: str) -> _MethodInfo:
        """Work out (and cache) what depends on the method name; callers looked in the cache first."""
        settings = self.settings
        attributes: dict[str, Any] = {sc.RPC_SYSTEM_NAME: sc.RPC_SYSTEM_VALUE, sc.ACP_METHOD_NAME: method}
        if sc.is_extension(method):
            attributes[sc.ACP_EXTENSION] = True
            namespace = sc.extension_namespace(method)
            if namespace is not None:
                attributes[sc.ACP_EXTENSION_NAMESPACE] = namespace
        inject = settings.inject and not sc.is_protocol_method(method)
        inject = inject and not settings.inject_excluded_methods(method)
        info = _MethodInfo(
            sc.span_name(method),
            attributes,
            traced=not settings.excluded_methods(method),
            inject=bool(inject),
            is_update=method == sc.SESSION_UPDATE,
        )
        if len(self._methods) < _METHOD_CACHE_SIZE:
            self._methods[method] = info
        return info

    def _wants_notification_span(self, info: _MethodInfo, peer: PeerState | None, params: Any) -> bool:
        """Whether a notification gets its own span under ``notification_spans``.

        In ``events`` mode a session/update whose session has a prompt in flight is recorded as an event
        on that prompt's span instead; without one it keeps its own span.
        """
        if self._no_notification_spans:
            return False
        if not (self._events_mode and info.is_update):
            return True
        session_id = params.get("sessionId") if type(params) is dict else None
        call = peer.prompts.get(session_id) if peer is not None and type(session_id) is str else None
        if call is None or call.span is None:
            return True
        if not call.span.is_recording():
            return False
        if call.events >= self.settings.max_events_per_span:
            call.dropped += 1
        else:
            call.events += 1
            attributes: dict[str, Any] = {}
            _add_update_attributes(attributes, params)
            if self.settings.capture_content:
                attributes[sc.ACP_PARAMS] = _truncate(params, self.settings.capture_content_max_length)
            call.span.add_event(sc.SESSION_UPDATE_EVENT, attributes)
        return False

    def _start_attributes(
        self, info: _MethodInfo, params: Any, request_id: Any, peer: PeerState | None
    ) -> dict[str, Any]:
        attributes = info.attributes.copy()
        if request_id is not None:
            attributes[sc.JSONRPC_REQUEST_ID] = str(request_id)
        if type(params) is dict:
            session_id = params.get("sessionId")
            if type(session_id) is str:
                attributes[sc.ACP_SESSION_ID] = session_id
                attributes[sc.GEN_AI_CONVERSATION_ID] = session_id
        if peer is not None and peer.attributes:
            attributes.update(peer.attributes)
        if info.is_update:
            _add_update_attributes(attributes, params)
        return attributes

    def _on_params(self, call: Call, params: Any) -> None:
        span = call.span
        assert span is not None
        if call.method == sc.INITIALIZE and type(params) is dict:
            self._initialize_params(call, params)
        if call.method == sc.SESSION_PROMPT and call.session_id is not None and call.peer is not None:
            call.peer.prompts[call.session_id] = call
        if self.settings.capture_content and params is not None:
            span.set_attribute(sc.ACP_PARAMS, _truncate(params, self.settings.capture_content_max_length))

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

    def _on_result(self, call: Call, result: Any) -> None:
        span = call.span
        assert span is not None
        if type(result) is dict:
            if call.method == sc.INITIALIZE:
                self._initialize_result(call, result)
            elif call.method == sc.SESSION_PROMPT:
                stop_reason = _str_or_none(result.get("stopReason"))
                if stop_reason is not None:
                    span.set_attribute(sc.ACP_STOP_REASON, stop_reason)
            if call.session_id is None and call.method in _SESSION_RESULT_METHODS:
                session_id = _str_or_none(result.get("sessionId"))
                if session_id is not None:
                    span.set_attribute(sc.ACP_SESSION_ID, session_id)
                    span.set_attribute(sc.GEN_AI_CONVERSATION_ID, session_id)
        if self.settings.capture_content and result is not None:
            span.set_attribute(sc.ACP_RESULT, _truncate(result, self.settings.capture_content_max_length))
