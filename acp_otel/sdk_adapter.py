"""Thin wrapt wrappers that feed the ACP Python SDK's messages through the engine.

Hooks are chosen by what the installed ``acp.connection.Connection`` has, not by version string
(see DESIGN.md §2): ``_execute_request`` (0.12.1 and later: returns the response payload) or else
``_run_request`` (up to 0.12.0: runs the handler and sends the response, re-raising ``RequestError``).
Releases before 0.12.1 keep the bound ``_run_request`` / ``_run_notification`` captured when a
connection is built, so the wrappers look the engine up on every call and pass straight through once
uninstrumented.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry.context import Context

from .engine import Engine
from .patching import Patches

_log = logging.getLogger("acp_otel")

_engine: Engine | None = None
_patches = Patches()


def current_engine() -> Engine | None:
    """The engine in use while instrumented, else ``None``."""
    return _engine


def install(engine: Engine) -> None:
    """Start tracing with ``engine``; patch ``acp.connection`` now or as soon as it is imported."""
    global _engine
    _engine = engine
    # Called at once when acp.connection is already imported, otherwise on its import.
    wrapt.register_post_import_hook(_patch_connection_module, "acp.connection")


def uninstall() -> None:
    """Stop tracing and restore every patched attribute; end what the engine still has open."""
    global _engine
    engine, _engine = _engine, None
    _patches.restore_all()
    if engine is not None:
        engine.shutdown()


def _patch_connection_module(module: Any) -> None:
    if _engine is None:  # a hook registered by an earlier instrument() that has since been undone
        return
    try:
        from acp.exceptions import RequestError

        global _RequestError
        _RequestError = RequestError
        conn = module.Connection
        _patches.wrap(conn, "__init__", _wrap_init)
        _patches.wrap(conn, "send_request", _send_request)
        _patches.wrap(conn, "send_notification", _send_notification)
        if "_execute_request" in conn.__dict__:
            _patches.wrap(conn, "_execute_request", _execute_request)
        else:
            _patches.wrap(conn, "_run_request", _run_request)
        _patches.wrap(conn, "_run_notification", _run_notification)
        _patches.wrap(conn, "close", _close)
        if "span_context" in module.__dict__:
            _patches.wrap(module, "span_context", _sdk_span_context)
    except Exception:
        _log.debug("acp_otel: could not patch acp.connection", exc_info=True)


class _NoRequestError(Exception):
    """Placeholder until ``acp.exceptions`` is imported; never raised."""


_RequestError: type[BaseException] = _NoRequestError


def _method_and_params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    if len(args) == 2 and not kwargs:  # the SDK's own calls
        return args[0], args[1]
    method = args[0] if args else kwargs.get("method")
    params = args[1] if len(args) > 1 else kwargs.get("params")
    return method, params


# ------------------------------------------------------------------ outgoing


async def _send_request(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    engine = _engine
    if engine is None:
        return await wrapped(*args, **kwargs)
    method, params = _method_and_params(args, kwargs)
    # send_request takes the next id synchronously before its first await.
    request_id = getattr(instance, "_next_request_id", None)
    call, new_params = engine.begin_outgoing(instance, method, params, request_id, is_request=True)
    if call is None and new_params is params:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(method, new_params)
    except asyncio.CancelledError:
        engine.end_cancelled(call)
        raise
    except _RequestError as exc:
        engine.end_rpc_error(call, getattr(exc, "code", None), str(exc), getattr(exc, "data", None))
        raise
    except BaseException as exc:
        engine.end_exception(call, exc)
        raise
    engine.end_result(call, result)
    return result


async def _send_notification(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    engine = _engine
    if engine is None:
        return await wrapped(*args, **kwargs)
    method, params = _method_and_params(args, kwargs)
    call, new_params = engine.begin_outgoing(instance, method, params, is_request=False)
    if call is None and new_params is params:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(method, new_params)
    except asyncio.CancelledError:
        engine.end_cancelled(call)
        raise
    except BaseException as exc:
        engine.end_exception(call, exc)
        raise
    engine.end_result(call, None)
    return result


# ------------------------------------------------------------------ incoming


async def _run_incoming(
    engine: Engine, wrapped: Any, instance: Any, args: tuple[Any, ...], is_request: bool, returns_payload: bool
) -> Any:
    """Run an incoming hook inside its span and the sender's context; return what the hook returned."""
    message = args[0]
    call, handler_message = engine.begin_incoming(instance, message, is_request)
    # Always attach: handler tasks otherwise inherit whatever was current when the connection was built.
    token = otel_context.attach(call.context if call is not None and call.context is not None else Context())
    try:
        out = await wrapped(handler_message, *args[1:])
    except asyncio.CancelledError:
        engine.end_cancelled(call)
        raise
    except _RequestError as exc:  # up to 0.12.0 _run_request re-raises after sending the error
        engine.end_rpc_error(call, getattr(exc, "code", None), str(exc), getattr(exc, "data", None))
        raise
    except BaseException as exc:
        engine.end_exception(call, exc)
        raise
    finally:
        otel_context.detach(token)
    if returns_payload:
        engine.end_payload(call, out)
    else:
        engine.end_result(call, out)
    return out


async def _passthrough(wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return await wrapped(*args, **kwargs)


def _incoming_hook(is_request: bool, returns_payload: bool) -> Any:
    """A wrapt wrapper for one incoming hook.

    It is a plain function returning the coroutine to await (one coroutine layer less per message);
    like the async hook it wraps, calling it never raises, awaiting does.
    """

    def hook(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = _engine
        if engine is None or not args:
            return _passthrough(wrapped, args, kwargs)
        return _run_incoming(engine, wrapped, instance, args, is_request, returns_payload)

    return hook


_execute_request = _incoming_hook(is_request=True, returns_payload=True)  # 0.12.1+: returns the payload
_run_request = _incoming_hook(is_request=True, returns_payload=False)  # up to 0.12.0: returns the result
_run_notification = _incoming_hook(is_request=False, returns_payload=False)


async def _close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    finally:
        engine = _engine
        if engine is not None:  # tool calls and v2 turns still open end with the connection
            engine.close_peer(instance, keep_requests=True)


# ------------------------------------------------------------------ handler and SDK spans


def _wrap_init(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Wrap the connection's method handler so that the exception a handler raised (which the SDK turns
    # into a -32603 response or only logs) can be named on our span.
    try:
        if args:
            args = (wrapt.FunctionWrapper(args[0], _handler_wrapper), *args[1:])
        elif "handler" in kwargs:
            kwargs = {**kwargs, "handler": wrapt.FunctionWrapper(kwargs["handler"], _handler_wrapper)}
    except Exception:
        _log.debug("acp_otel: could not wrap connection handler", exc_info=True)
    return wrapped(*args, **kwargs)


async def _handler_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    except Exception as exc:
        engine = _engine
        if engine is not None:
            code = getattr(exc, "code", None) if isinstance(exc, _RequestError) else None
            engine.note_handler_exception(exc, code)
        raise


# One shared do-nothing context manager (nullcontext is reusable and re-entrant): no allocation per message.
_NO_SDK_SPAN = contextlib.nullcontext()


def _sdk_span_context(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    engine = _engine
    if engine is not None and not engine.settings.keep_sdk_spans:
        # Our SERVER/CONSUMER spans replace the SDK's unpropagated acp.request / acp.notification.
        return _NO_SDK_SPAN
    return wrapped(*args, **kwargs)
