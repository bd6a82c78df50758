"""Thin wrapt wrappers that feed the ACP Python SDK's messages through the engine.

The instrumentor's patch table says which ``acp.connection`` attribute gets which wrapper; each
``*_wrapper(state)`` here builds one wrapper that reads the shared
:class:`~acp_otel._state.InstrumentationState` on every call. Hooks are chosen by what the installed
``Connection`` has, not by version string (see DESIGN.md §2): ``_execute_request`` (0.12.1 and later: returns
the response payload) or else
``_run_request`` (up to 0.12.0: runs the handler and sends the response, re-raising ``RequestError``; there the
response's ``MessageSender.send`` ends the span, see :func:`response_send_wrapper`).
Releases before 0.12.1 keep the bound ``_run_request`` / ``_run_notification`` captured when a
connection is built, so the wrappers look the engine up on every call and pass straight through once
uninstrumented.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

from . import _remote as remote
from ._patching import Wrapper

if TYPE_CHECKING:
    from ._engine import Engine
    from ._message_spans import Call
    from ._state import InstrumentationState

_log = logging.getLogger("acp_otel")


def _request_error() -> type[BaseException]:
    # Imported when a wrapper is built, i.e. once acp.connection (which imports it) is loaded.
    from acp.exceptions import RequestError

    return RequestError


def _method_and_params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    method = args[0] if args else kwargs.get("method")
    params = args[1] if len(args) > 1 else kwargs.get("params")
    return method, params


# ------------------------------------------------------------------ outgoing


def _outgoing_wrapper(state: InstrumentationState, is_request: bool) -> Wrapper:
    """The wrapper of ``send_request`` (``is_request``) or ``send_notification``."""
    request_error = _request_error()

    async def send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = state.engine
        if engine is None:
            return await wrapped(*args, **kwargs)
        if len(args) == 2 and not kwargs:  # the SDK's own calls
            method, params = args
        else:
            method, params = _method_and_params(args, kwargs)
        # send_request takes the next id synchronously before its first await.
        request_id = getattr(instance, "_next_request_id", None) if is_request else None
        call, new_params = engine.begin_outgoing(instance, method, params, request_id, is_request)
        if call is None:  # nothing to end (the context may still have been injected)
            return await wrapped(method, new_params) if new_params is not params else await wrapped(*args, **kwargs)
        # A remote transport (HTTP, WebSocket) sends with our span current: the HTTP request or frame that
        # carries the message is its child. Not for stdio, where nothing would use it (one lookup per message).
        connection = getattr(instance, remote.REMOTE_ATTR, None)
        span = call.span
        token = None if connection is None or span is None else remote.attach_for_send(connection, span)
        try:
            result = await wrapped(method, new_params)
        except asyncio.CancelledError:
            engine.end_cancelled(call)
            raise
        except request_error as exc:  # an error response to our request
            engine.end_rpc_error(call, getattr(exc, "code", None), str(exc), getattr(exc, "data", None))
            raise
        except BaseException as exc:
            engine.end_exception(call, exc)
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
        if connection is not None and method == "initialize":
            remote.after_initialize(engine, instance, call.span)
        engine.end_result(call, result)
        return result

    return send


def send_request_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection.send_request``: a CLIENT span, trace context injected into ``params._meta``."""
    return _outgoing_wrapper(state, is_request=True)


def send_notification_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection.send_notification``: a PRODUCER span (or an event), trace context injected."""
    return _outgoing_wrapper(state, is_request=False)


# ------------------------------------------------------------------ incoming


class _Answering:
    """The request a ``_run_request`` (up to 0.12.0) is answering, until its response's send ends its span."""

    __slots__ = ("call", "ended", "engine", "request_id")

    def __init__(self, engine: Engine, call: Call, request_id: Any) -> None:
        self.engine = engine
        self.call = call
        self.request_id = request_id
        self.ended = False


# Set only inside a _run_request (up to 0.12.0); the handler's own tasks inherit it but never send responses.
_ANSWERING: ContextVar[_Answering | None] = ContextVar("acp_otel_answering", default=None)


async def _run_incoming(
    engine: Engine,
    request_error: type[BaseException],
    wrapped: Any,
    instance: Any,
    args: tuple[Any, ...],
    is_request: bool,
    returns_payload: bool,
) -> Any:
    """Run an incoming hook inside its span and the sender's context; return what the hook returned."""
    message = args[0]
    call, handler_message, context = engine.begin_incoming(instance, message, is_request)
    alone = len(args) == 1  # the hooks take the message alone: no star call (and its tuple) then
    # Always attach: handler tasks otherwise inherit whatever was current when the connection was built.
    token = otel_context.attach(context)
    if call is None:  # no span to end (a streamed chunk in the default mode, say)
        try:
            return await (wrapped(handler_message) if alone else wrapped(handler_message, *args[1:]))
        finally:
            otel_context.detach(token)
    answering = None
    if returns_payload:  # a remote connection sends the response under this span (remote.run_request_wrapper)
        connection = getattr(instance, remote.REMOTE_ATTR, None)
        if connection is not None:
            remote.remember_server_span(connection, call.span)
    elif is_request:  # up to 0.12.0 the hook sends the response itself: its send ends the span
        answering = _Answering(engine, call, message.get("id") if type(message) is dict else None)
        answering_token = _ANSWERING.set(answering)
    try:
        out = await (wrapped(handler_message) if alone else wrapped(handler_message, *args[1:]))
    except asyncio.CancelledError:
        if answering is None or not answering.ended:
            engine.end_cancelled(call)
        raise
    except request_error as exc:  # up to 0.12.0 _run_request re-raises after sending the error
        if answering is None or not answering.ended:
            engine.end_rpc_error(call, getattr(exc, "code", None), str(exc), getattr(exc, "data", None))
        raise
    except BaseException as exc:
        if answering is None or not answering.ended:
            engine.end_exception(call, exc)
        raise
    finally:
        if answering is not None:
            _ANSWERING.reset(answering_token)
        otel_context.detach(token)
    if returns_payload:
        engine.end_payload(call, out)
    elif answering is None or not answering.ended:
        engine.end_result(call, out)
    return out


async def _passthrough(wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return await wrapped(*args, **kwargs)


def _incoming_wrapper(state: InstrumentationState, is_request: bool, returns_payload: bool) -> Wrapper:
    """A wrapper for one incoming hook.

    It is a plain function returning the coroutine to await (one coroutine layer less per message);
    like the async hook it wraps, calling it never raises, awaiting does.
    """
    request_error = _request_error()

    def hook(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = state.engine
        if engine is None or not args:
            return _passthrough(wrapped, args, kwargs)
        return _run_incoming(engine, request_error, wrapped, instance, args, is_request, returns_payload)

    return hook


def execute_request_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection._execute_request`` (0.12.1+: returns the response payload): a SERVER span."""
    return _incoming_wrapper(state, is_request=True, returns_payload=True)


def run_request_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection._run_request`` (up to 0.12.0: sends the response itself): a SERVER span."""
    return _incoming_wrapper(state, is_request=True, returns_payload=False)


def response_send_wrapper(state: InstrumentationState) -> Wrapper:
    """``MessageSender.send`` (up to 0.12.0): the response to the request being answered ends its SERVER span.

    Up to 0.12.0 ``_run_request`` returns only once the response is written: a peer that reads it and at once
    terminates this process (the SDK's example client does) would otherwise lose the span with the process.
    Ended when the response is handed to the sender, the span ends where 0.12.1's ``_execute_request`` ends it.
    """

    def send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        answering = _ANSWERING.get()
        if answering is not None and not answering.ended and state.engine is not None:
            payload = args[0] if args else kwargs.get("payload")
            # A response (no method) with the request's id; the handler's own requests to the peer have a method.
            if type(payload) is dict and "method" not in payload and payload.get("id") == answering.request_id:
                answering.ended = True
                try:
                    answering.engine.end_payload(answering.call, payload)
                except Exception:
                    _log.debug("acp_otel: could not end the span of an answered request", exc_info=True)
        return wrapped(*args, **kwargs)

    return send


def run_notification_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection._run_notification``: a CONSUMER span (or an event on the prompt span)."""
    return _incoming_wrapper(state, is_request=False, returns_payload=False)


def close_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection.close``: tool calls and v2 turns still open end with the connection."""

    async def close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        finally:
            engine = state.engine
            if engine is not None:
                engine.close_peer(instance, keep_requests=True)

    return close


# ------------------------------------------------------------------ handler and SDK spans


def init_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection.__init__``: wraps the method handler, so that the exception a handler raised (which
    the SDK turns into a -32603 response or only logs) can be named on our span."""
    request_error = _request_error()

    def naming_failures(original: Any) -> Any:
        # A plain closure, not a wrapt proxy: the handler is an SDK-internal callable passed to its own
        # constructor (nothing patched, nothing to undo, no identity to keep), and it runs for every
        # incoming message, where a FunctionWrapper's dispatch costs several times a Python call.
        @functools.wraps(original, updated=())
        async def handler(*args: Any, **kwargs: Any) -> Any:
            try:
                return await original(*args, **kwargs)
            except Exception as exc:
                engine = state.engine
                if engine is not None:
                    code = getattr(exc, "code", None) if isinstance(exc, request_error) else None
                    engine.note_handler_exception(exc, code)
                raise

        return handler

    def init(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            if args:
                args = (naming_failures(args[0]), *args[1:])
            elif "handler" in kwargs:
                kwargs = {**kwargs, "handler": naming_failures(kwargs["handler"])}
        except Exception:
            _log.debug("acp_otel: could not wrap connection handler", exc_info=True)
        out = wrapped(*args, **kwargs)
        engine = state.engine
        if engine is not None:
            writer = args[1] if len(args) > 1 else kwargs.get("writer")
            try:  # a remote transport (HTTP, WebSocket): the connection's id and peer on its spans
                remote.bind(engine, instance, writer)
            except Exception:
                _log.debug("acp_otel: could not read the connection's transport", exc_info=True)
            try:  # an agent spawned through the SDK: its command names its profile until initialize does
                command = state.spawned.pop(writer, None) if writer is not None else None
                if command is not None:
                    engine.note_agent_command(instance, command)
            except TypeError:  # a writer that cannot be weakly referenced was never recorded
                pass
        return out

    return init


# One shared do-nothing context manager (nullcontext is reusable and re-entrant): no allocation per message.
_NO_SDK_SPAN = contextlib.nullcontext()


def sdk_span_context_wrapper(state: InstrumentationState) -> Wrapper:
    """``acp.connection.span_context``: the SDK's own unpropagated spans, off unless kept."""

    def span_context(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        settings = state.settings
        if settings is not None and not settings.keep_sdk_spans:
            # Our SERVER/CONSUMER spans replace the SDK's acp.request / acp.notification.
            return _NO_SDK_SPAN
        return wrapped(*args, **kwargs)

    return span_context
