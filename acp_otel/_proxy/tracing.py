"""The proxy's tracing adapter: raw NDJSON lines in, the same lines (with trace keys) out, spans via the engine.

For every request or notification a span is started through :class:`acp_otel._engine.Engine` for the
side that sent it (CLIENT for a request, PRODUCER for a notification), as a child of the context the
sender put in ``params._meta`` or as a new root. The forwarded line carries the proxy span's context,
spliced into the raw bytes (:mod:`.splice`). Responses are matched by id against the requests that
went the other way; unknown, duplicate and late responses are relayed and ignored.

Nothing here may disturb the relay: any failure is logged at debug level and the line goes out as it came.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from .. import _propagation as propagation
from .._engine import Call, Engine
from .splice import splice_meta

_log = logging.getLogger("acp_otel")

# A peer that never answers must not grow the pending table without bound; past this, the oldest
# request of that direction is ended as unanswered.
MAX_PENDING = 4096


class Direction(enum.Enum):
    """Which way a line travels."""

    EDITOR_TO_AGENT = "editor->agent"
    AGENT_TO_EDITOR = "agent->editor"

    @property
    def opposite(self) -> Direction:
        return Direction.AGENT_TO_EDITOR if self is Direction.EDITOR_TO_AGENT else Direction.EDITOR_TO_AGENT


class AgentExited(ConnectionError):
    """The agent process ended before answering (names the error on spans still pending)."""


class Unanswered(ConnectionError):
    """A request was dropped from tracking: its id was reused, or too many requests were pending."""


class MalformedResponse(ValueError):
    """A response whose ``error`` member is not a JSON-RPC error object."""


class ProxyConnection:
    """The engine's ``peer`` for the proxied connection (one object for both directions)."""

    __slots__ = ("__dict__", "__weakref__")


def _id_key(request_id: Any) -> str:
    # Ids are any JSON value (even objects, which are not hashable): match on a canonical spelling.
    return json.dumps(request_id, sort_keys=True, separators=(",", ":"))


class MessageTracer:
    """Traces the lines of one proxied connection. Thread-safe: each direction runs in its own thread."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.peer = ProxyConnection()
        self._lock = threading.Lock()
        self._pending: dict[Direction, dict[str, Call]] = {d: {} for d in Direction}

    @property
    def engine(self) -> Engine:
        """The engine the lines are traced with."""
        return self._engine

    @property
    def lock(self) -> threading.Lock:
        """Held while a line is traced: whoever holds it has the engine to itself."""
        return self._lock

    def handler(self, direction: Direction) -> Callable[[bytes], tuple[bytes, Callable[[], None] | None]]:
        """A line handler for :func:`acp_otel._proxy.framing.pump` in ``direction``."""
        return lambda line: self.on_line(direction, line)

    def on_line(self, direction: Direction, line: bytes) -> tuple[bytes, Callable[[], None] | None]:
        """Trace one line; returns the bytes to forward and what to call once they are written."""
        try:
            text = line.decode("utf-8")
            message = json.loads(text)
        except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep: relay as is
            return line, None
        if type(message) is not dict:  # a batch, a bare value: relayed untraced
            return line, None
        try:
            with self._lock:
                return self._on_message(direction, line, text, message)
        except Exception:
            _log.debug("acp_otel proxy: failed to trace a line", exc_info=True)
            return line, None

    def _on_message(
        self, direction: Direction, line: bytes, text: str, message: dict[str, Any]
    ) -> tuple[bytes, Callable[[], None] | None]:
        method = message.get("method")
        if method is None:
            if "id" in message and ("result" in message or "error" in message):
                self._on_response(direction, message)
            return line, None
        is_request = "id" in message
        request_id = message.get("id") if is_request else None
        _, carrier = propagation.strip_and_extract(message, self._engine.propagation_keys)
        parent = propagation.context_from_carrier(carrier)
        sender_traced = trace.get_current_span(parent).get_span_context().is_valid
        params = message.get("params")
        call, new_params = self._engine.begin_outgoing(
            self.peer, method, params, request_id, is_request, parent=parent, sender_traced=sender_traced
        )
        forward = line
        if new_params is not params:
            forward = self._spliced(text, params, new_params) or line
        if call is None:
            return forward, None
        if not is_request:
            return forward, lambda: self._end_notification(call)
        self._track(direction, request_id, call)
        return forward, None

    def _spliced(self, text: str, params: Any, new_params: Any) -> bytes | None:
        """The line with the trace keys the engine injected, or ``None`` when nothing changed."""
        new_meta = new_params.get(propagation.META) if type(new_params) is dict else None
        if type(new_meta) is not dict:
            return None
        old_meta = params.get(propagation.META) if type(params) is dict else None
        old_meta = old_meta if type(old_meta) is dict else {}
        values = {
            key: new_meta[key]
            for key in self._engine.injected_keys  # with the extra_trace_keys, when set
            if type(new_meta.get(key)) is str and (key not in old_meta or old_meta[key] != new_meta[key])
        }
        if not values:
            return None
        try:
            return splice_meta(text, values).encode("utf-8")
        except Exception:  # SpliceError, or a shape the walk did not expect: forward the line untouched
            _log.debug("acp_otel proxy: could not splice trace keys", exc_info=True)
            return None

    def _track(self, direction: Direction, request_id: Any, call: Call) -> None:
        pending = self._pending[direction]
        key = _id_key(request_id)
        previous = pending.pop(key, None)
        if previous is not None:
            self._engine.end_exception(previous, Unanswered("request id reused before a response"))
        elif len(pending) >= MAX_PENDING:
            oldest = next(iter(pending))
            self._engine.end_exception(pending.pop(oldest), Unanswered("too many pending requests"))
        pending[key] = call

    def _on_response(self, direction: Direction, message: dict[str, Any]) -> None:
        # A response answers a request that went the other way.
        call = self._pending[direction.opposite].pop(_id_key(message.get("id")), None)
        if call is None:
            return  # unknown, duplicate or late: relayed, not traced
        if "error" in message:
            error = message["error"]
            if type(error) is dict:
                self._engine.end_rpc_error(call, error.get("code"), error.get("message"), error.get("data"))
            else:
                self._engine.end_exception(call, MalformedResponse("error member is not an object"))
        else:
            self._engine.end_result(call, message.get("result"))

    def _end_notification(self, call: Call) -> None:
        with self._lock:
            self._engine.end_result(call, None)

    def close(self, reason: str) -> None:
        """The agent is gone: end every pending request with an error and close the connection's state."""
        try:
            with self._lock:
                for pending in self._pending.values():
                    calls = list(pending.values())
                    pending.clear()
                    for call in calls:
                        self._engine.end_exception(call, AgentExited(reason))
                self._engine.close_peer(self.peer)
        except Exception:
            _log.debug("acp_otel proxy: failed to close the connection's spans", exc_info=True)
