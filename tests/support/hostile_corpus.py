"""Hostile and malformed JSON-RPC input for the "application never notices" tests.

``INCOMING`` cases are lines a raw peer writes to an SDK connection (``side`` "agent" or "client");
``OUTGOING`` cases are answers a raw peer gives to a request the SDK side sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk_versions import READS_ON_AFTER_BAD_LINE

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"
TP_VALID = f"00-{TRACE_ID}-{SPAN_ID}-01"

BAGGAGE_VALUES = ("BAGGAGE-VALUE-ONE", "BAGGAGE-VALUE-TWO", "BAGGAGE-SECRET-USER")
BAGGAGE_VALID = f"tenant={BAGGAGE_VALUES[0]},feature={BAGGAGE_VALUES[1]};prop=1,user={BAGGAGE_VALUES[2]}"

# traceparent values W3C forbids (or that are not strings at all).
BAD_TRACEPARENTS: dict[str, Any] = {
    "version-ff": f"ff-{TRACE_ID}-{SPAN_ID}-01",
    "zero-trace-id": f"00-{'0' * 32}-{SPAN_ID}-01",
    "zero-span-id": f"00-{TRACE_ID}-{'0' * 16}-01",
    "short-trace-id": f"00-{TRACE_ID[:-2]}-{SPAN_ID}-01",
    "long-trace-id": f"00-{TRACE_ID}ab-{SPAN_ID}-01",
    "short-span-id": f"00-{TRACE_ID}-{SPAN_ID[:-1]}-01",
    "long-span-id": f"00-{TRACE_ID}-{SPAN_ID}00-01",
    "short-version": f"0-{TRACE_ID}-{SPAN_ID}-01",
    "long-flags": f"00-{TRACE_ID}-{SPAN_ID}-001",
    "upper-case-hex": f"00-{TRACE_ID.upper()}-{SPAN_ID.upper()}-01",
    "extra-field-v00": f"00-{TRACE_ID}-{SPAN_ID}-01-extra",
    "non-hex-trace-id": f"00-{TRACE_ID[:-1]}g-{SPAN_ID}-01",
    "non-hex-flags": f"00-{TRACE_ID}-{SPAN_ID}-zz",
    "wrong-separators": f"00_{TRACE_ID}_{SPAN_ID}_01",
    "empty-string": "",
    "whitespace-padded": f"  {TP_VALID}  ",
    "nul-and-unicode": f"00-{TRACE_ID}-{SPAN_ID}-01\u0000\u00e9",
    "huge-string": "0" * 200_000,
    "number": 123,
    "float": 1.5,
    "bool": True,
    "list": [TP_VALID],
    "dict": {"traceparent": TP_VALID},
    "null": None,
}

# tracestate / baggage beyond W3C limits, malformed, or not strings (sent with a valid traceparent).
BAD_TRACESTATES: dict[str, Any] = {
    "oversized-bytes": "k=" + "v" * 9000,
    "too-many-members": ",".join(f"k{i}=v{i}" for i in range(40)),
    "malformed": "a=b,,=c,===,@@=x,k=v=w",
    "non-string-number": 42,
    "non-string-list": ["k=v"],
    "non-string-dict": {"k": "v"},
    "null": None,
}
BAD_BAGGAGE: dict[str, Any] = {
    "oversized-bytes": "k=" + "v" * 9000,
    "too-many-members": ",".join(f"k{i}=v{i}" for i in range(200)),
    "malformed": "novalue,=x,k==,;;;,k=%ZZ",
    "non-string-number": 7,
    "non-string-list": [BAGGAGE_VALID],
    "non-string-dict": {"tenant": BAGGAGE_VALUES[0]},
    "null": None,
    "valid-secret": BAGGAGE_VALID,
}


def _meta_variants() -> dict[str, Any]:
    """name -> the ``_meta`` value sent (a dict missing a key means the key is absent)."""
    v: dict[str, Any] = {}
    for name, tp in BAD_TRACEPARENTS.items():
        v[f"traceparent:{name}"] = {"traceparent": tp}
    for name, ts in BAD_TRACESTATES.items():
        v[f"tracestate:{name}"] = {"traceparent": TP_VALID, "tracestate": ts}
    for name, bg in BAD_BAGGAGE.items():
        v[f"baggage:{name}"] = {"traceparent": TP_VALID, "baggage": bg}
    v["valid-all-three-plus-other-keys"] = {
        "traceparent": TP_VALID,
        "tracestate": "vendor=abc",
        "baggage": BAGGAGE_VALID,
        "vendor.dev/keep": {"x": 1},
    }
    v["only-other-keys"] = {"vendor.dev/keep": 1}
    v["empty-dict"] = {}
    v["non-ascii-keys"] = {"traceparent": TP_VALID, "clé-ünïcødé": "välue", "名前": ["値"]}
    v["multi-megabyte"] = {"traceparent": TP_VALID, "blob": "x" * 3_000_000}
    v["deeply-nested"] = {"traceparent": TP_VALID, "deep": _nested(150)}
    v["meta-list"] = [{"traceparent": TP_VALID}]
    v["meta-string"] = TP_VALID
    v["meta-number"] = 17
    v["meta-null"] = None
    v["meta-bool"] = False
    return v


def _nested(depth: int) -> Any:
    value: Any = {"leaf": True}
    for i in range(depth):
        value = {f"l{i}": value} if i % 2 else [value]
    return value


META_VARIANTS = _meta_variants()


def _with_meta(params: dict[str, Any], meta: Any) -> dict[str, Any]:
    return {**params, "_meta": meta}


def agent_lines_for_meta(meta: Any) -> list[Any]:
    """A request, a notification and an extension request to an agent, all carrying ``meta``."""
    return [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": _with_meta({"cwd": "/w", "mcpServers": []}, meta),
        },
        {"jsonrpc": "2.0", "method": "session/cancel", "params": _with_meta({"sessionId": "s-1"}, meta)},
        {"jsonrpc": "2.0", "id": 2, "method": "_known.dev/ping", "params": _with_meta({"q": 1}, meta)},
        {"jsonrpc": "2.0", "method": "_unknown.dev/note", "params": _with_meta({"q": 2}, meta)},
    ]


def client_lines_for_meta(meta: Any) -> list[Any]:
    """A request, a session/update and an extension request to a client, all carrying ``meta``."""
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    return [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "fs/read_text_file",
            "params": _with_meta({"sessionId": "s-1", "path": "/p"}, meta),
        },
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": _with_meta({"sessionId": "s-1", "update": chunk}, meta),
        },
        {"jsonrpc": "2.0", "id": 2, "method": "_known.dev/ping", "params": _with_meta({"q": 1}, meta)},
    ]


@dataclass(frozen=True)
class Case:
    name: str
    side: str  # "agent" or "client"
    lines: tuple[Any, ...]
    # For the SDK releases where even the uninstrumented run cannot pass (a mark from sdk_versions).
    marks: tuple[Any, ...] = ()


def _req(id_: Any, method: Any, params: Any = None, **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        msg["params"] = params
    msg.update(extra)
    return msg


def _note(method: Any, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def _update(kind: Any, **fields: Any) -> dict[str, Any]:
    return _note("session/update", {"sessionId": "s-1", "update": {"sessionUpdate": kind, **fields}})


def _tool_update(update_kind: str, **fields: Any) -> dict[str, Any]:
    """A ``tool_call`` / ``tool_call_update`` whose fields may include the ACP ``kind``."""
    return _note("session/update", {"sessionId": "s-1", "update": {"sessionUpdate": update_kind, **fields}})


TP = {"traceparent": TP_VALID}

# Malformed messages, ids, params and methods (each with and without trace context where it matters).
STRUCTURAL: list[Case] = [
    Case("params-list", "agent", (_req(1, "session/new", [1, 2]), _req(2, "_known.dev/x", ["a"]))),
    Case("params-string", "agent", (_req(1, "initialize", "params"), _note("session/cancel", "s"))),
    Case("params-number", "agent", (_req(1, "initialize", 5), _req(2, "_known.dev/x", 5))),
    Case("params-null-explicit", "agent", ({"jsonrpc": "2.0", "id": 1, "method": "authenticate", "params": None},)),
    Case("params-absent", "agent", (_req(1, "initialize"), _note("session/cancel"))),
    Case("params-list-client", "client", (_req(1, "fs/read_text_file", []), _note("session/update", ["x"]))),
    Case(
        "deeply-nested-params",
        "agent",
        (_req(1, "_known.dev/deep", {"v": _nested(300), "_meta": TP}), _req(2, "session/new", {"cwd": _nested(50)})),
    ),
    Case(
        "non-ascii-param-keys",
        "agent",
        (_req(1, "_known.dev/ü", {"名前": "値", "_meta": {**TP, "ключ": 1}}), _note("_ñote", {"é": 1, "_meta": TP})),
    ),
    Case(
        "nested-meta-trace-keys-preserved",
        "agent",
        (
            _req(
                1,
                "initialize",
                {
                    "protocolVersion": 1,
                    "clientCapabilities": {"_meta": {"traceparent": "nested-keep", "baggage": "k=v"}},
                    "clientInfo": {"name": "c", "version": "1", "_meta": {"tracestate": "keep=1"}},
                    "_meta": TP,
                },
            ),
            _req(2, "_known.dev/x", {"inner": {"_meta": {"traceparent": TP_VALID}}, "_meta": TP}),
        ),
    ),
    Case(
        "nested-meta-trace-keys-preserved-client",
        "client",
        (_update("agent_message_chunk", content={"type": "text", "text": "x", "_meta": TP}, _meta={"baggage": "k=v"}),),
    ),
    Case("string-ids", "agent", (_req("abc", "authenticate", {"methodId": "m", "_meta": TP}), _req("", "initialize"))),
    Case(
        "odd-ids",
        "agent",
        (
            _req(-1, "authenticate", {"methodId": "m"}),
            _req(2**70, "authenticate", {"methodId": "m"}),
            _req(1.5, "authenticate", {"methodId": "m"}),
            _req(True, "authenticate", {"methodId": "m"}),
            _req([1], "authenticate", {"methodId": "m"}),
            _req({"a": 1}, "authenticate", {"methodId": "m"}),
        ),
    ),
    Case("notification-with-null-id", "agent", (_req(None, "session/cancel", {"sessionId": "s", "_meta": TP}),)),
    Case(
        "notification-with-null-id-client",
        "client",
        (_req(None, "session/update", {"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": []}}),),
    ),
    Case(
        "unknown-methods",
        "agent",
        (
            _req(1, "no/such/method", {"_meta": TP}),
            _note("no/such/notification", {"_meta": TP}),
            _req(2, "_vendor.dev/unknown", {"_meta": TP}),
            _note("_vendor.dev/unknown-note", {"_meta": TP}),
            _req(3, "_", {}),
            _req(4, "$/cancel_request", {"id": 1}),
            _note("$/cancel_request", {"id": 1}),
        ),
    ),
    Case(
        "unknown-methods-client",
        "client",
        (
            _req(1, "no/such/method", {"_meta": TP}),
            _note("no/such/notification", {"_meta": TP}),
            _req(2, "_vendor.dev/unknown", {"_meta": TP}),
            _note("_vendor.dev/unknown-note", {"_meta": TP}),
        ),
    ),
    Case(
        "non-string-methods",
        "agent",
        (
            _req(1, 5, {}),
            _req(2, ["a"], {}),
            _req(3, {"m": 1}, {}),
            _note(7, {}),
            _req(4, True, {"_meta": TP}),
        ),
    ),
    Case("method-null-is-a-response", "agent", ({"jsonrpc": "2.0", "id": 9, "method": None},)),
    Case(
        "session-update-kinds",
        "client",
        (
            _update("mystery_kind", text="x", _meta=TP),
            _update("_vendor.dev/custom", payload={"a": 1}),
            _update("agent_message_chunk", content={"type": "text", "text": "ok"}, unknownField=1),
            _update(None),
            _update(5),
            _note("session/update", {"update": {"sessionUpdate": "plan", "entries": []}}),
            _note("session/update", {"sessionId": "s", "update": "not-an-object", "_meta": TP}),
        ),
    ),
    Case(
        "responses-to-nothing",
        "agent",
        (
            {"jsonrpc": "2.0", "id": 999, "result": {"x": 1}},
            {"jsonrpc": "2.0", "id": "0", "result": None},
            {"jsonrpc": "2.0", "id": 0},
            {"jsonrpc": "2.0", "id": None, "error": {"code": 1, "message": "m"}},
            {"jsonrpc": "2.0", "id": 0, "error": "not-an-object"},
            {"jsonrpc": "2.0", "result": 1},
        ),
        marks=(READS_ON_AFTER_BAD_LINE,),
    ),
    Case("response-with-unhashable-id", "client", ({"jsonrpc": "2.0", "id": [1], "result": 1},)),
    Case("not-json-and-empty", "agent", ("not json", "{", "", "   ", b"\xff\xfe\xfd", '{"jsonrpc": "2.0", "id": 1')),
    Case("json-not-object-list", "agent", ("[]",), marks=(READS_ON_AFTER_BAD_LINE,)),
    Case(
        "json-batch", "agent", (json.dumps([_req(1, "initialize", {"_meta": TP})]),), marks=(READS_ON_AFTER_BAD_LINE,)
    ),
    Case("json-string", "client", ('"just a string"',), marks=(READS_ON_AFTER_BAD_LINE,)),
    Case("json-number", "agent", ("5",), marks=(READS_ON_AFTER_BAD_LINE,)),
    Case("json-null-line", "agent", ("null",), marks=(READS_ON_AFTER_BAD_LINE,)),
    Case(
        "jsonrpc-version-wrong-or-missing",
        "agent",
        (
            {"jsonrpc": "1.0", "id": 1, "method": "authenticate", "params": {"methodId": "m", "_meta": TP}},
            {"id": 2, "method": "authenticate", "params": {"methodId": "m"}},
        ),
    ),
    Case(
        "handler-argument-collision-through-meta",
        "agent",
        (_req(1, "session/new", {"cwd": "/w", "mcpServers": [], "_meta": {**TP, "cwd": "/evil", "mcp_servers": 3}}),),
    ),
    Case(
        "client-requests-hostile-params",
        "client",
        (
            _req(1, "session/request_permission", {"sessionId": "s", "toolCall": {}, "options": [], "_meta": TP}),
            _req(2, "session/request_permission", {"_meta": [TP_VALID]}),
            _req(3, "terminal/create", {"sessionId": "s", "command": "x", "_meta": {**TP, "baggage": 1}}),
            _req(4, "fs/write_text_file", {"sessionId": "s", "path": "/p", "content": "c", "_meta": "x"}),
        ),
    ),
    Case(
        "prompt-hostile",
        "agent",
        (
            _req(1, "session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": "x"}], "_meta": TP}),
            _req(2, "session/prompt", {"sessionId": 5, "prompt": "nope", "_meta": TP}),
            _req(3, "session/prompt", {"sessionId": "s", "prompt": [{"type": "_vendor.dev/block"}]}),
        ),
    ),
    Case(
        "duplicate-request-ids",
        "agent",
        (
            _req(7, "authenticate", {"methodId": "a", "_meta": TP}),
            _req(7, "authenticate", {"methodId": "b", "_meta": TP}),
        ),
    ),
    Case(
        "duplicate-keys-in-json",
        "agent",
        (
            '{"jsonrpc":"2.0","id":1,"method":"authenticate","params":{"methodId":"m","_meta":{"traceparent":"x",'
            f'"traceparent":"{TP_VALID}"}}}}}}',
        ),
    ),
]


def incoming_cases() -> list[Case]:
    cases = list(STRUCTURAL)
    for name, meta in META_VARIANTS.items():
        # Over 64 KiB in one line: see READS_ON_AFTER_BAD_LINE.
        marks = (READS_ON_AFTER_BAD_LINE,) if name in ("traceparent:huge-string", "multi-megabyte") else ()
        cases.append(Case(f"meta:{name}", "agent", tuple(agent_lines_for_meta(meta)), marks))
        cases.append(Case(f"meta:{name}:client", "client", tuple(client_lines_for_meta(meta)), marks))
    return cases


INCOMING = incoming_cases()


# ------------------------------------------------------------------------------------------ responses


@dataclass(frozen=True)
class Answer:
    name: str
    respond: Callable[[dict[str, Any]], list[Any]]


def _r(id_: Any, **members: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, **members}


OUTGOING_ANSWERS: list[Answer] = [
    Answer("plain-result", lambda q: [_r(q["id"], result={"v": 1})]),
    Answer("unknown-id", lambda q: [_r(10_000, result={"v": "wrong"})]),
    Answer("string-id", lambda q: [_r(str(q["id"]), result={"v": "string id"})]),
    Answer("float-id", lambda q: [_r(float(q["id"]), result={"v": "float id"})]),
    Answer("null-id", lambda q: [_r(None, result={"v": "null id"})]),
    Answer("duplicate", lambda q: [_r(q["id"], result={"v": "first"}), _r(q["id"], result={"v": "second"})]),
    Answer("neither-result-nor-error", lambda q: [_r(q["id"])]),
    Answer("error-null", lambda q: [_r(q["id"], error=None)]),
    Answer("error-empty", lambda q: [_r(q["id"], error={})]),
    Answer("error-string", lambda q: [_r(q["id"], error="boom")]),
    Answer("error-list", lambda q: [_r(q["id"], error=[1])]),
    Answer("error-odd-members", lambda q: [_r(q["id"], error={"code": "x", "message": 5, "data": [1, {"a": None}]})]),
    Answer("error-with-data", lambda q: [_r(q["id"], error={"code": -32000, "message": "m", "data": {"s": "DATA"}})]),
    Answer("result-and-error", lambda q: [_r(q["id"], result={"v": 1}, error={"code": 1, "message": "m"})]),
    Answer("result-null", lambda q: [_r(q["id"], result=None)]),
    Answer("result-huge", lambda q: [_r(q["id"], result={"blob": "y" * 2_000_000})]),
    Answer("unhashable-id", lambda q: [_r([q["id"]], result=1)]),
    Answer("garbage-then-answer", lambda q: ["not json", "[]"]),
    Answer("answer-with-method", lambda q: [_r(q["id"], method="x/y", result={"v": 1})]),
    Answer("answer-missing-jsonrpc", lambda q: [{"id": q["id"], "result": {"v": "no version"}}]),
    # An untraced agent streaming hostile tool calls and usage inside the turn (the client makes tool spans).
    Answer(
        "hostile-tool-updates",
        lambda q: [
            _tool_update("tool_call", toolCallId="t1", kind="read", status="pending"),
            _tool_update("tool_call_update", toolCallId="t1", status="failed"),
            _tool_update("tool_call_update", toolCallId="t1", status="completed"),
            _tool_update("tool_call", toolCallId="t1", kind="read", status="pending"),
            _tool_update("tool_call", toolCallId=["x"], kind={"a": 1}, status=None),
            _tool_update("tool_call_update", toolCallId="ghost", status={"s": 1}, name=7),
            _tool_update("tool_call", toolCallId="t2", name="n" * 5000, kind="_vendor"),
            _update("agent_message_chunk", content={"type": "text", "text": "x"}),
            _update("state_update", state="idle", usage={"inputTokens": -1, "outputTokens": "x"}),
            _update("usage_update", used=-1, size=2**70, cost={"amount": float("nan"), "currency": ["USD"]}),
            _update("usage_update", used="x", size=None, cost={"amount": float("inf"), "currency": "USD"}),
            _update("usage_update", used=True, cost={"amount": -5, "currency": "U" * 5000}),
            _update("usage_update", cost="free"),
            _r(q["id"], result={"stopReason": ["x"], "usage": {"inputTokens": "many", "outputTokens": 2**70}}),
        ],
    ),
]


def raw_request(method: str, params: Any) -> Callable[[Any], Any]:
    """``call(conn)`` sending ``method`` with ``params`` as they are, below the SDK's typed methods."""
    return lambda conn: conn._conn.send_request(method, params)


def outgoing_calls() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """name -> (side, call(conn)) for requests the SDK side sends to the raw peer."""
    raw = raw_request

    return {
        "client:session/new": ("client", raw("session/new", {"cwd": "/w", "mcpServers": []})),
        "client:params-none": ("client", raw("authenticate", None)),
        "client:params-list": ("client", raw("session/new", [1, 2])),
        "client:params-string": ("client", raw("session/new", "s")),
        "client:meta-list": ("client", raw("session/new", {"cwd": "/", "_meta": [1]})),
        "client:meta-caller-traceparent": ("client", raw("_vendor.dev/x", {"_meta": {"traceparent": "mine", "k": 1}})),
        "client:protocol-method": ("client", raw("$/ping", {"x": 1})),
        "client:session/prompt": ("client", raw("session/prompt", {"sessionId": "s-1", "prompt": []})),
        "agent:request_permission": ("agent", raw("session/request_permission", {"sessionId": "s", "options": []})),
        "agent:ext": ("agent", lambda conn: conn.ext_method("vendor.dev/q", {"a": 1, "_meta": {"k": "v"}})),
    }


# The corpus is meant to be broad: keep it so.
assert len(INCOMING) + len(OUTGOING_ANSWERS) >= 50, (len(INCOMING), len(OUTGOING_ANSWERS))
