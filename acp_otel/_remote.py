"""Remote transports of the ACP Python SDK 1.0 (``acp.http`` Streamable HTTP, ``acp.ws`` WebSocket).

Every message of these transports still passes through ``acp.connection.Connection`` (the SDK adapter traces
it there); what this module adds is what only a remote transport has:

* **which connection**: the transport's connection id and the peer's network address, recorded on every span of
  the connection (:func:`bind`, when the ``Connection`` is built, and later facts as they become known);
* **the carrying HTTP request**: the agent's HTTP server takes each editor message from a POST; when the
  message's ``_meta`` holds no trace context, the POST's (from its ``traceparent`` header, or the HTTP server
  span an HTTP instrumentation made current) is put there, so that the message's span continues the editor's
  trace (:func:`deliver_wrapper`);
* **whose HTTP request**: while a message is handed to the transport, the span of that message is current, so
  an HTTP or WebSocket instrumentation makes the request (or frame) that carries it a child of that span (the
  SDK adapter does it for requests and notifications, :func:`run_request_wrapper` for responses).

A ``Connection`` on a remote transport carries a :class:`RemoteConnection` in the attribute named
:data:`REMOTE_ATTR`; stdio connections carry none, and the per-message wrappers look no further then.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from . import _propagation as propagation
from . import _semconv as sc
from ._patching import Wrapper

if TYPE_CHECKING:
    from ._engine import Engine
    from ._state import InstrumentationState

_log = logging.getLogger("acp_otel")

REMOTE_ATTR = "_acp_otel_remote"
"""The ``Connection`` attribute holding its :class:`RemoteConnection` (remote transports only)."""

_CONNECTION_ID_HEADER = "acp-connection-id"

# The transports' classes, by module (the SDK names them _HttpStreamTransport, _HttpTransport and
# _WebSocketTransport, twice): a connection is remote when its transport's class comes from one of them.
_HTTP_CLIENT, _HTTP_SERVER = "acp.http.client", "acp.http.server"
_WS_CLIENT, _WS_SERVER = "acp.ws.client", "acp.ws.server"
REMOTE_MODULES = (_HTTP_CLIENT, _HTTP_SERVER, _WS_CLIENT, _WS_SERVER)

# The HTTP POST being handled (acp.http.asgi._post): (AcpServer, starlette Request). Set while the SDK handles
# it, so that the transport it delivers the message to can read the request's headers and client address.
_POST: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("acp_otel_post", default=None)
# The WebSocket being accepted (acp.ws.server.handle_websocket): the facts known before its Connection is built.
_WS_FACTS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("acp_otel_ws", default=None)


class RemoteConnection:
    """What the tracing knows of one connection on a remote transport."""

    __slots__ = ("__weakref__", "connection", "facts", "sends_in_task", "server_spans")

    def __init__(self, connection: Any, facts: dict[str, Any], sends_in_task: bool = True) -> None:
        self.connection = weakref.ref(connection)
        self.facts = facts
        # Whether the transport writes a message in the sending task (HTTP client: a POST; WebSocket: a frame),
        # where a current span parents what an HTTP or WebSocket instrumentation makes of it. The HTTP server
        # only queues it for the SSE stream's own task: making our span current there would change nothing.
        self.sends_in_task = sends_in_task
        # The SERVER span of each incoming request, by the task that runs its handler, until the response is
        # handed to the transport (Connection._run_request receives that task): the response goes under it.
        self.server_spans: dict[Any, trace.Span] = {}

    def learn(self, engine: Engine, facts: Mapping[str, Any]) -> None:
        """Record facts learned after the connection was built (the id the server assigned, say)."""
        new = {k: v for k, v in facts.items() if v is not None and self.facts.get(k) != v}
        if not new:
            return
        self.facts.update(new)
        connection = self.connection()
        if connection is not None:
            engine.note_connection_facts(connection, new)


# Transport -> RemoteConnection: how the server's HTTP transport (which knows nothing of its Connection) finds it.
_BY_TRANSPORT: weakref.WeakKeyDictionary[Any, RemoteConnection] = weakref.WeakKeyDictionary()


def _port(value: Any) -> int | None:
    return value if type(value) is int else None


def _address_facts(address: Any, host_key: str, port_key: str) -> dict[str, Any]:
    """``(host, port)`` (a tuple, or Starlette's ``Address``) as the conventions' address attributes."""
    facts: dict[str, Any] = {}
    try:
        if address is None:
            return facts
        host, port = address[0], address[1]
        if isinstance(host, str) and host:
            facts[host_key] = host
        if _port(port) is not None:
            facts[port_key] = port
    except Exception:
        _log.debug("acp_otel: unreadable peer address %r", address, exc_info=True)
    return facts


def _transport_facts(transport: Any, module: str) -> dict[str, Any]:
    """What a transport tells about its connection when the ``Connection`` is built."""
    facts: dict[str, Any] = {sc.NETWORK_TRANSPORT: "tcp"}
    if module == _HTTP_CLIENT:
        facts[sc.NETWORK_PROTOCOL_NAME] = "http"
        url = urlsplit(str(getattr(transport, "_url", "")))
        if url.hostname:
            facts[sc.SERVER_ADDRESS] = url.hostname
        try:
            port = url.port
        except ValueError:
            port = None
        port = port if port is not None else {"http": 80, "https": 443}.get(url.scheme)
        if port is not None:
            facts[sc.SERVER_PORT] = port
        connection_id = getattr(transport, "_connection_id", None)
        if isinstance(connection_id, str):
            facts[sc.ACP_CONNECTION_ID] = connection_id
    elif module == _WS_CLIENT:
        facts[sc.NETWORK_PROTOCOL_NAME] = "websocket"
        ws = getattr(transport, "_ws", None)
        facts.update(_address_facts(getattr(ws, "remote_address", None), sc.SERVER_ADDRESS, sc.SERVER_PORT))
        headers = getattr(getattr(ws, "response", None), "headers", None)
        connection_id = headers.get(_CONNECTION_ID_HEADER) if headers is not None else None
        if isinstance(connection_id, str):
            facts[sc.ACP_CONNECTION_ID] = connection_id
    elif module == _WS_SERVER:
        facts[sc.NETWORK_PROTOCOL_NAME] = "websocket"
        facts.update(_address_facts(getattr(getattr(transport, "_ws", None), "client", None), *_CLIENT_KEYS))
        facts.update(_WS_FACTS.get() or {})
    else:  # the HTTP server: its POSTs tell (deliver_wrapper)
        facts[sc.NETWORK_PROTOCOL_NAME] = "http"
    return facts


_CLIENT_KEYS = (sc.CLIENT_ADDRESS, sc.CLIENT_PORT)


def bind(engine: Engine, connection: Any, transport: Any) -> None:
    """A ``Connection`` was built: when its transport is remote, mark it and record what is known already.

    Called for every connection; a stdio one costs a look at its transport's module.
    """
    module = type(transport).__module__
    if module not in REMOTE_MODULES:
        return
    facts = _transport_facts(transport, module)
    remote = RemoteConnection(connection, facts, sends_in_task=module != _HTTP_SERVER)
    setattr(connection, REMOTE_ATTR, remote)
    _BY_TRANSPORT[transport] = remote
    engine.note_connection_facts(connection, facts)


def after_initialize(engine: Engine, connection: Any, span: Any) -> None:
    """The client's ``initialize`` completed: the HTTP transport knows the connection id now."""
    remote = getattr(connection, REMOTE_ATTR, None)
    if remote is None or sc.ACP_CONNECTION_ID in remote.facts:
        return
    connection_id = getattr(getattr(connection, "_transport", None), "_connection_id", None)
    if isinstance(connection_id, str):
        remote.learn(engine, {sc.ACP_CONNECTION_ID: connection_id})
        if span is not None and span.is_recording():
            span.set_attribute(sc.ACP_CONNECTION_ID, connection_id)


# ------------------------------------------------------------------ responses under their SERVER span


def remember_server_span(remote: RemoteConnection, span: Any) -> None:
    """The handler of an incoming request runs in this task: its response goes out under ``span`` (where the
    transport sends in the sending task: see :func:`run_request_wrapper`)."""
    task = asyncio.current_task()
    if task is not None and span is not None and remote.sends_in_task:
        remote.server_spans[task] = span


def attach_for_send(remote: RemoteConnection, span: Any) -> contextvars.Token[Context] | None:
    """Make ``span`` current while its message is handed to the transport, so that the HTTP request or frame
    carrying it is its child; returns the token to detach, or ``None`` where the transport only queues it."""
    if not remote.sends_in_task:
        return None
    return otel_context.attach(trace.set_span_in_context(span))


def run_request_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection._run_request`` (SDK 1.0: awaits the handler's task, then sends the response).

    On a remote connection the response is handed to the transport with the request's SERVER span current,
    so that the HTTP request or WebSocket frame carrying it is that span's child. Elsewhere: passed through.
    """

    async def run_request(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        remote = getattr(instance, REMOTE_ATTR, None)
        handler = args[1] if len(args) > 1 else kwargs.get("handler")
        if remote is None or not remote.sends_in_task or state.engine is None or handler is None:
            return await wrapped(*args, **kwargs)
        # The SDK creates the handler's task just before this one, so the handler has usually started (and its
        # span is known) by now; only otherwise wait for it, as _run_request does first anyway. Not waiting
        # saves an event loop iteration per request.
        span = remote.server_spans.pop(handler, None)
        if span is None:
            try:
                await asyncio.wait({handler})
            except BaseException:
                remote.server_spans.pop(handler, None)
                raise
            span = remote.server_spans.pop(handler, None)
        if span is None:
            return await wrapped(*args, **kwargs)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return await wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return run_request


# ------------------------------------------------------------------ the HTTP server (agent side)


def post_wrapper(state: InstrumentationState) -> Wrapper:
    """``acp.http.asgi._post(server, request)``: the request stays known while the SDK handles its message.

    The Starlette app binds ``_post`` when it is created (``create_asgi_app``): instrument before that.
    """

    async def post(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if state.engine is None or len(args) < 2:
            return await wrapped(*args, **kwargs)
        token = _POST.set((args[0], args[1]))
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _POST.reset(token)

    return post


def _carrier_of_request(request: Any) -> dict[str, str]:
    """The trace context of the HTTP request carrying a message: the HTTP server span an instrumentation made
    current (it continues the request's ``traceparent``), else the request's own trace headers."""
    current = otel_context.get_current()
    if trace.get_current_span(current).get_span_context().is_valid:
        return propagation.carrier_for(current)
    headers = getattr(request, "headers", None)
    if headers is None:
        return {}
    carrier = {}
    for key in propagation.propagator_fields():
        value = headers.get(key)
        if isinstance(value, str):
            carrier[key] = value
    return carrier


def lacks_context(message: Any, keys: tuple[str, ...]) -> bool:
    """Whether ``message`` is a request or notification whose ``params._meta`` could take trace context and
    holds none of its own (``keys``: the propagator's)."""
    if type(message) is not dict or "method" not in message:
        return False  # a response: it makes no span
    params = message.get("params")
    if type(params) is not dict:
        return False  # no object to add _meta to without changing the message's shape
    meta = params.get(propagation.META)
    return meta is None or (type(meta) is dict and not any(key in meta for key in keys))


def with_request_context(message: dict[str, Any], carrier: dict[str, str]) -> dict[str, Any]:
    """``message`` (one :func:`lacks_context` accepted) with ``carrier`` in a copy of ``params._meta``: the
    HTTP request's context is the fallback, first hop only; ``_meta`` stays the one per-message channel."""
    if not carrier:
        return message
    new_message = dict(message)
    new_message["params"] = propagation.inject_into_params(message["params"], carrier)
    return new_message


def deliver_wrapper(state: InstrumentationState) -> Wrapper:
    """``acp.http.server._HttpTransport.deliver_to_agent``: a message from a POST enters the connection.

    Records the connection's id and the client's address (once), and gives a message without trace context in
    ``_meta`` the POST's context.
    """

    def deliver(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = state.engine
        post = _POST.get()
        if engine is None or post is None or len(args) != 1 or kwargs:
            return wrapped(*args, **kwargs)
        message = args[0]
        try:
            server, request = post
            remote = _BY_TRANSPORT.get(instance)
            if remote is not None and sc.ACP_CONNECTION_ID not in remote.facts:
                remote.learn(engine, _post_facts(server, request, instance))
            if lacks_context(message, engine.propagation_keys):
                message = with_request_context(message, _carrier_of_request(request))
        except Exception:
            _log.debug("acp_otel: could not read the HTTP request of a message", exc_info=True)
            message = args[0]
        return wrapped(message)

    return deliver


def _post_facts(server: Any, request: Any, transport: Any) -> dict[str, Any]:
    # The address only: a client's POSTs may come over several TCP connections (ports) of its pool.
    facts = _address_facts(getattr(request, "client", None), *_CLIENT_KEYS)
    facts.pop(sc.CLIENT_PORT, None)
    connection_id = request.headers.get(_CONNECTION_ID_HEADER)
    if not isinstance(connection_id, str):  # initialize: the server has just minted the id
        connections = getattr(server, "_connections", None) or {}
        connection_id = next((cid for cid, (_, t) in connections.items() if t is transport), None)
    if isinstance(connection_id, str):
        facts[sc.ACP_CONNECTION_ID] = connection_id
    return facts


# ------------------------------------------------------------------ the HTTP client, the WebSocket server


def open_stream_wrapper(state: InstrumentationState) -> Wrapper:
    """``acp.http.client._HttpStreamTransport._open_stream``: the long-lived SSE GET starts a trace of its own.

    It is opened while ``initialize`` (or whichever message named a new session) is being handled, whose span
    would otherwise parent a stream that lasts as long as the connection.
    """

    def open_stream(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if state.engine is None:
            return wrapped(*args, **kwargs)
        token = otel_context.attach(Context())
        try:
            return wrapped(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return open_stream


def handle_websocket_wrapper(state: InstrumentationState) -> Wrapper:
    """``acp.http.asgi.handle_websocket(agent_factory, websocket)``: the connection id the server sends when it
    accepts the socket, for the connection built right after."""

    async def handle_websocket(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        websocket = args[1] if len(args) > 1 else None
        if state.engine is None or websocket is None:
            return await wrapped(*args, **kwargs)
        facts: dict[str, Any] = {}
        try:
            accept = websocket.accept

            async def accept_noting_id(*a: Any, **kw: Any) -> Any:
                for name, value in kw.get("headers") or ():
                    if bytes(name).lower() == _CONNECTION_ID_HEADER.encode():
                        facts[sc.ACP_CONNECTION_ID] = bytes(value).decode("latin-1")
                return await accept(*a, **kw)

            websocket.accept = accept_noting_id
        except Exception:
            _log.debug("acp_otel: could not watch a WebSocket's accept", exc_info=True)
        token = _WS_FACTS.set(facts)
        try:
            return await wrapped(*args, **kwargs)
        finally:
            _WS_FACTS.reset(token)

    return handle_websocket
