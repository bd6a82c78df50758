"""Test harness for "the application never notices the tracing": raw NDJSON peers, recorders, comparisons.

A real SDK connection (agent side or client side) talks over a loopback TCP socket to a *raw* peer: the
test writes JSON-RPC lines byte for byte and reads what comes back. Every exchange is run twice in the
same process, uninstrumented and then instrumented, and the two outcomes are compared after removing
only what instrumentation is allowed to change (the three W3C keys in a root ``params._meta``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from log_capture import capture_logs
from spans import SpanCounter, wait_spans_closed

from acp_otel._semconv import RESERVED_META_KEYS

SENTINEL_ID = "sentinel-id"

AGENT_SENTINEL = {"jsonrpc": "2.0", "id": SENTINEL_ID, "method": "authenticate", "params": {"methodId": "sentinel"}}
CLIENT_SENTINEL = {
    "jsonrpc": "2.0",
    "id": SENTINEL_ID,
    "method": "fs/write_text_file",
    "params": {"sessionId": "sentinel", "path": "/sentinel", "content": "sentinel"},
}

AGENT_HANDLERS = (
    "initialize",
    "authenticate",
    "new_session",
    "load_session",
    "list_sessions",
    "close_session",
    "set_session_mode",
    "set_config_option",
    "prompt",
    "cancel",
    "fork_session",
    "resume_session",
)
CLIENT_HANDLERS = (
    "session_update",
    "request_permission",
    "read_text_file",
    "write_text_file",
    "create_terminal",
    "terminal_output",
    "release_terminal",
    "wait_for_terminal_exit",
    "kill_terminal",
    "create_elicitation",
    "complete_elicitation",
)
RESULTS: dict[str, Any] = {
    "initialize": {"protocolVersion": 1, "agentCapabilities": {}},
    "new_session": {"sessionId": "sess-hostile"},
    "prompt": {"stopReason": "end_turn"},
    "request_permission": {"outcome": {"outcome": "cancelled"}},
    "read_text_file": {"content": "body"},
    "create_terminal": {"terminalId": "term-1"},
}


# ---------------------------------------------------------------------------------------------- spans


def attribute_values(span: Any) -> Iterator[Any]:
    for value in (span.attributes or {}).values():
        yield value
        if isinstance(value, (tuple, list)):
            yield from value
    for event in span.events:
        for value in (event.attributes or {}).values():
            yield value
            if isinstance(value, (tuple, list)):
                yield from value


def assert_no_baggage_in_spans(spans: Any, baggage_values: tuple[str, ...], label: str = "") -> None:
    """Incoming baggage never becomes (part of) an attribute value."""
    for span in spans:
        for value in attribute_values(span):
            assert value not in baggage_values, (label, span.name, value)
            text = value if isinstance(value, str) else str(value)
            assert not any(b in text for b in baggage_values), (label, span.name, text[:200])


# ---------------------------------------------------------------------------------------------- apps


def plain(value: Any) -> Any:
    """JSON-comparable form of handler arguments (pydantic models dumped by alias)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return {"__model__": type(value).__name__, **dump(mode="json", by_alias=True, exclude_unset=True)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _recorder(name: str) -> Callable[..., Any]:
    async def handler(self: Any, **kwargs: Any) -> Any:
        self.calls.append((name, plain(kwargs)))
        return RESULTS.get(name)

    handler.__name__ = name
    return handler


class _Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def ext_method(self, method: str, params: dict[str, Any]) -> Any:
        self.calls.append(("ext_method", method, plain(params)))
        if method.startswith("known"):
            return {"ok": True}
        from acp.exceptions import RequestError

        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.calls.append(("ext_notification", method, plain(params)))


class RecordingAgent(_Recording):
    """Every agent handler accepts ``**kwargs`` and records what it was called with."""


class RecordingClient(_Recording):
    """Every client handler accepts ``**kwargs`` and records what it was called with."""


for _name in AGENT_HANDLERS:
    setattr(RecordingAgent, _name, _recorder(_name))
for _name in CLIENT_HANDLERS:
    setattr(RecordingClient, _name, _recorder(_name))


def make_connection(side: str, app: Any, writer: Any, reader: Any) -> Any:
    from acp import AgentSideConnection, ClientSideConnection

    cls = AgentSideConnection if side == "agent" else ClientSideConnection
    return cls(lambda conn: app, writer, reader)


def inner(conn: Any) -> Any:
    return getattr(conn, "_conn", conn)


# ---------------------------------------------------------------------------------------------- normalization


def strip_root_meta(params: Any) -> Any:
    """What instrumentation hands a handler: ``params`` without the trace keys in its root ``_meta``."""
    if type(params) is not dict or type(params.get("_meta")) is not dict:
        return params
    meta = params["_meta"]
    if not any(k in meta for k in RESERVED_META_KEYS):
        return params
    new_meta = {k: v for k, v in meta.items() if k not in RESERVED_META_KEYS}
    out = {k: v for k, v in params.items() if k != "_meta"}
    if new_meta:
        out["_meta"] = new_meta
    return out


def expected_calls(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The uninstrumented handler calls as an instrumented run must see them (trace keys gone)."""
    out = []
    for call in calls:
        if call[0] in ("ext_method", "ext_notification"):
            out.append((call[0], call[1], strip_root_meta(call[2])))
        else:
            out.append((call[0], {k: v for k, v in call[1].items() if k not in RESERVED_META_KEYS}))
    return out


def strip_meta_everywhere(value: Any) -> Any:
    """Used on error ``data`` only (validation errors echo their input): drop trace keys in any ``_meta``."""
    if isinstance(value, dict):
        out = {k: strip_meta_everywhere(v) for k, v in value.items()}
        if isinstance(out.get("_meta"), dict):
            out = strip_root_meta(out)
        return out
    if isinstance(value, list):
        return [strip_meta_everywhere(v) for v in value]
    if isinstance(value, str):
        # pydantic's messages repr their input; compare them without the part that may differ.
        return (
            value if "traceparent" not in value and "tracestate" not in value and "baggage" not in value else "<meta>"
        )
    return value


def normalize_response(message: Any) -> Any:
    if isinstance(message, dict) and isinstance(message.get("error"), dict) and "data" in message["error"]:
        error = dict(message["error"])
        error["data"] = strip_meta_everywhere(error["data"])
        message = {**message, "error": error}
    return message


# ---------------------------------------------------------------------------------------------- exchanges


@dataclass
class Outcome:
    received: list[Any] = field(default_factory=list)  # what the raw peer read, parsed
    calls: list[tuple[Any, ...]] = field(default_factory=list)  # handler calls on the SDK side
    logs: list[tuple[str, int, str, str | None]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # exceptions that came from acp_otel
    caller: Any = None  # what an outgoing request's caller saw
    disconnected: bool = False
    answered: bool = False  # incoming: the sentinel got its response, or the connection ended
    request_seen: bool = False  # outgoing: the raw peer received the SDK side's request
    settled: bool = False  # the SDK side had no handler task left running when the outcome was taken


class RawPeer:
    """An SDK connection on one end of a loopback socket, raw bytes on the other."""

    def __init__(self, side: str, app: Any) -> None:
        self.side = side
        self.app = app
        self.conn: Any = None
        self.received: list[Any] = []
        self._server: asyncio.AbstractServer | None = None
        self._sdk_writer: Any = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._pump: asyncio.Task[None] | None = None
        self._arrived = asyncio.Event()

    async def __aenter__(self) -> RawPeer:
        ready = asyncio.Event()

        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._sdk_writer = writer
            self.conn = make_connection(self.side, self.app, writer, reader)
            ready.set()

        self._server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port, limit=2**26)
        await asyncio.wait_for(ready.wait(), 5)
        self._pump = asyncio.create_task(self._read_all())
        return self

    async def _read_all(self) -> None:
        assert self.reader is not None
        while True:
            line = await self.reader.readline()
            if not line:
                return
            try:
                self.received.append(json.loads(line))
            except ValueError:
                self.received.append(line.decode("utf-8", "replace"))
            self._arrived.set()

    async def write_lines(self, lines: list[str | bytes]) -> None:
        assert self.writer is not None
        for line in lines:
            data = line if isinstance(line, bytes) else line.encode("utf-8")
            self.writer.write(data + b"\n")
        await self.writer.drain()

    def disconnected(self) -> bool:
        c = inner(self.conn)
        return bool(getattr(c, "_disconnected", False) or getattr(c, "_closed", False))

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Wait until ``predicate()``; False if it still fails after ``timeout`` seconds. Checked after every
        loop iteration at first (what it waits for is usually a few iterations away), then on each line
        the raw peer reads and every 5 ms."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        spins = 0
        while not predicate():
            if loop.time() >= deadline:
                return False
            spins += 1
            if spins < 100:
                await asyncio.sleep(0)
                continue
            self._arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), 0.005)
        return True

    def busy_tasks(self) -> list[asyncio.Task[Any]]:
        """The SDK connection's handler/response tasks still running (not its long-running loops)."""
        tasks = getattr(getattr(inner(self.conn), "_tasks", None), "_tasks", None) or ()
        return [t for t in tasks if not t.done() and t.get_name() not in LONG_RUNNING_TASKS]

    async def settle(self, timeout: float = 5.0) -> bool:
        """Wait until no handler task of the SDK connection is running; False if some still run at timeout."""
        return await self.wait_for(lambda: not self.busy_tasks(), timeout)

    def got_response(self, request_id: Any) -> bool:
        return any(isinstance(m, dict) and m.get("id") == request_id and "method" not in m for m in self.received)

    async def __aexit__(self, *exc: Any) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), 5)
        for w in (self.writer, self._sdk_writer):
            if w is not None:
                w.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(w.wait_closed(), 1)
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(BaseException):
                await self._pump
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)


# The SDK connection's tasks that live as long as the connection (0.8-1.0 names); every other task it
# supervises handles one message.
LONG_RUNNING_TASKS = ("acp.Connection.receive", "acp.Sender.loop", "acp.Dispatcher.loop")


def _encode(line: Any) -> str | bytes:
    return line if isinstance(line, (str, bytes)) else json.dumps(line)


async def incoming_exchange(side: str, lines: list[Any], counter: SpanCounter | None = None) -> Outcome:
    """Write ``lines`` (then a sentinel request) to an SDK ``side``; collect responses and handler calls."""
    app = RecordingAgent() if side == "agent" else RecordingClient()
    sentinel = AGENT_SENTINEL if side == "agent" else CLIENT_SENTINEL
    with capture_logs() as logs:
        async with RawPeer(side, app) as peer:
            await peer.write_lines([_encode(x) for x in lines] + [json.dumps(sentinel)])
            answered = await peer.wait_for(lambda: peer.got_response(SENTINEL_ID) or peer.disconnected())
            settled = await peer.settle()  # handlers of earlier lines (all immediate) have finished
            outcome = Outcome(
                received=list(peer.received),
                calls=list(app.calls),
                disconnected=peer.disconnected(),
                answered=answered,
                settled=settled,
            )
        if counter is not None:
            await wait_spans_closed(counter)
    outcome.logs = logs.app_view()
    outcome.failures = logs.our_failures()
    return outcome


async def outgoing_exchange(
    side: str,
    call: Callable[[Any], Any],
    respond: Callable[[dict[str, Any]], list[Any]],
    counter: SpanCounter | None = None,
) -> Outcome:
    """``call(conn)`` sends one request from an SDK ``side`` to the raw peer, which answers with
    ``respond(request)`` lines followed by one valid final response; returns what the caller saw."""
    app = RecordingAgent() if side == "agent" else RecordingClient()
    with capture_logs() as logs:
        async with RawPeer(side, app) as peer:
            task = asyncio.create_task(call(peer.conn))
            await peer.wait_for(
                lambda: task.done() or any(isinstance(m, dict) and "method" in m for m in peer.received)
            )
            request_seen = any(isinstance(m, dict) and "method" in m for m in peer.received)
            if request_seen:
                request = next(m for m in peer.received if isinstance(m, dict) and "method" in m)
                answer = [_encode(x) for x in respond(request)]
                answer.append(json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": {"final": True}}))
                await peer.write_lines(answer)
            # SDK 0.12.1 pops the pending future before parsing a response, so a response whose
            # ``error`` is not an object kills the receive loop and leaves the request hanging for ever
            # (with or without tracing). The caller then gives up, which is what we record. A request that
            # can still complete does so within a few loop iterations of the disconnection (its future is
            # rejected synchronously), so "hung" is decided by iterations, not by time.
            await peer.wait_for(lambda: task.done() or peer.disconnected())
            for _ in range(200):
                if task.done():
                    break
                await asyncio.sleep(0)
            seen: Any
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                seen = ("hung", "caller cancelled")
            else:
                try:
                    seen = ("result", plain(task.result()))
                except Exception as exc:  # what the application sees
                    seen = (
                        "raised",
                        type(exc).__name__,
                        getattr(exc, "code", None),
                        str(exc),
                        getattr(exc, "data", None),
                    )
            settled = await peer.settle()
            outcome = Outcome(
                received=list(peer.received),
                caller=seen,
                disconnected=peer.disconnected(),
                request_seen=request_seen,
                settled=settled,
            )
        if counter is not None:
            await wait_spans_closed(counter)
    outcome.logs = logs.app_view()
    outcome.failures = logs.our_failures()
    return outcome


def _without_trace_keys(message: Any, baseline: Any) -> Any:
    """``message`` with trace keys removed from its root ``params._meta``; a ``_meta`` (or params) that
    only exists because of injection is removed when ``baseline`` (the uninstrumented message) had none."""
    if not isinstance(message, dict) or type(message.get("params")) is not dict:
        return message
    params = dict(message["params"])
    if type(params.get("_meta")) is dict:
        params["_meta"] = {k: v for k, v in params["_meta"].items() if k not in RESERVED_META_KEYS}
        base_params = baseline.get("params") if isinstance(baseline, dict) else None
        had_meta = type(base_params) is dict and "_meta" in base_params
        if not params["_meta"] and had_meta and base_params["_meta"] is None:
            params["_meta"] = None  # an explicit ``_meta: null`` is filled like an absent one
        elif not params["_meta"] and not had_meta:
            del params["_meta"]
            if not params and base_params is None:
                return {**message, "params": None}
    return {**message, "params": params}


def assert_same_incoming(plain_run: Outcome, traced: Outcome, label: str = "") -> None:
    assert not plain_run.failures and not traced.failures, (label, plain_run.failures, traced.failures)
    for run in (plain_run, traced):  # neither run timed out waiting
        assert run.answered and run.settled, (label, run.answered, run.settled)
    assert [normalize_response(m) for m in traced.received] == [normalize_response(m) for m in plain_run.received], (
        label
    )
    assert traced.calls == expected_calls(plain_run.calls), label
    for call in traced.calls:  # the handler never sees our keys at the root of its arguments
        if call[0] in ("ext_method", "ext_notification"):
            meta = call[2].get("_meta") if isinstance(call[2], dict) else None
            assert not (isinstance(meta, dict) and any(k in meta for k in RESERVED_META_KEYS)), (label, call)
        else:
            assert not any(k in call[1] for k in RESERVED_META_KEYS), (label, call)
    assert traced.logs == plain_run.logs, label
    assert traced.disconnected == plain_run.disconnected, label


def assert_same_outgoing(plain_run: Outcome, traced: Outcome, label: str = "") -> None:
    assert not plain_run.failures and not traced.failures, (label, plain_run.failures, traced.failures)
    assert plain_run.settled and traced.settled, label
    assert traced.request_seen == plain_run.request_seen, label
    assert traced.caller == plain_run.caller, label
    sent_plain = [m for m in plain_run.received if isinstance(m, dict) and "method" in m]
    sent_traced = [m for m in traced.received if isinstance(m, dict) and "method" in m]
    assert len(sent_plain) == len(sent_traced), label
    for a, b in zip(sent_plain, sent_traced, strict=True):
        # A trace key the caller set itself is replaced by ours (propagators overwrite): compare without.
        assert _without_trace_keys(b, a) == _without_trace_keys(a, a), label
    assert traced.logs == plain_run.logs, label
    assert traced.disconnected == plain_run.disconnected, label


async def run_off_then_on(instrument: Any, exchange: Callable[..., Any], *args: Any, counter: Any = None) -> Any:
    """``exchange(*args)`` uninstrumented, then instrumented (``counter`` tracks the traced run's spans);
    returns (plain outcome, traced outcome). No span may start in the uninstrumented run."""
    instrument.off()
    started = counter.started if counter is not None else 0
    plain_run = await exchange(*args)
    assert counter is None or counter.started == started, "a span started with the instrumentation off"
    instrument()
    traced = await exchange(*args, counter)
    return plain_run, traced
