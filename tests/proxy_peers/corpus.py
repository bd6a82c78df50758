"""Lines for the proxy's byte-fidelity tests: what is sent, and exactly what must arrive.

``Case.expected`` is the byte string the peer must receive; in lines the proxy injects into, ``{TP}``
stands for the traceparent the proxy wrote (read back from the received line). Everything else of
those lines (spacing, key order, escapes, number spellings, duplicate keys) must arrive unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TP_VALID = f"00-{TRACE_ID}-b7ad6b7169203331-01"
TP_RE = re.compile(rb'"traceparent":"(00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-9a-f])"')
BIG_LINE_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    sent: bytes
    expected: bytes  # == sent for lines that must pass untouched

    @property
    def injected(self) -> bool:
        return b"{TP}" in self.expected


def same(name: str, sent: bytes) -> Case:
    return Case(name, sent, sent)


def _tp(name: str, sent: bytes, expected: str | bytes) -> Case:
    return Case(name, sent, expected.encode() if isinstance(expected, str) else expected)


UNCHANGED = [
    same("not-json", b"this is not json {"),
    same("invalid-utf8", b'{"jsonrpc":"2.0","method":"m/x","params":{"t":"\xff\xfe\xc3\x28"}}'),
    same("utf8-surrogate", b'{"jsonrpc":"2.0","id":1,"method":"m/x","params":{"t":"\xed\xa0\x80"}}'),
    same("bom", b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"m/bom","params":{}}'),
    same("batch", b'[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}},{"jsonrpc":"2.0","method":"n"}]'),
    same("array", b"[1, 2 ,3]"),
    same("string", b'"just a string"'),
    same("number", b"  42  "),
    same("null", b"null"),
    same("empty", b""),
    same("blank", b" \t "),
    same("lone-cr", b"\r"),
    same("unknown-response", b'{"jsonrpc":"2.0","id":999,"result":{"x":1}}'),
    same("object-id-error", b'{"jsonrpc":"2.0","id":{"weird":[1]},"error":{"code":-1,"message":"m"}}'),
    same("malformed-error", b'{"jsonrpc":"2.0","id":null,"error":"not-an-object"}'),
    same("method-not-string", b'{"jsonrpc":"2.0","id":5,"method":123,"params":{}}'),
    same("params-list", b'{"jsonrpc":"2.0","id":6,"method":"m/list","params":[1,2]}'),
    same("meta-string", b'{"jsonrpc":"2.0","id":7,"method":"m/meta","params":{"_meta":"str"}}'),
    same("protocol-method", b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}'),
    same("deep-nesting", b'{"jsonrpc":"2.0","method":"m/deep","params":{"a":' + b"[" * 50000 + b"]" * 50000 + b"}}"),
    same("nul-and-controls", b'\x00\x01{"jsonrpc":"2.0"}\x1b[0m'),
]

INJECTED = [
    _tp(
        "odd-spacing-no-meta",
        b'{ "jsonrpc" : "2.0" , "id" : 3 , "method" : "session/new" , '
        b'"params" : { "cwd" : "/tmp" , "mcpServers" : [ ] } }',
        '{ "jsonrpc" : "2.0" , "id" : 3 , "method" : "session/new" , "params" : { "cwd" : "/tmp" , "mcpServers" : [ ],'
        '"_meta":{"traceparent":"{TP}"} } }',
    ),
    _tp(
        "escapes-numbers-other-meta-keys",
        b'{"jsonrpc":"2.0","id":"str-id","method":"_x.dev/m","params":{"z":1.50E+3,"s":"\\u00e9\\ud83d\\ude00\xc3\xa9",'
        b'"_meta":{"other":{"k":[1,2]},"traceparent":"garbage","b3":"x"}}}',
        b'{"jsonrpc":"2.0","id":"str-id","method":"_x.dev/m","params":{"z":1.50E+3,"s":"\\u00e9\\ud83d\\ude00\xc3\xa9",'
        b'"_meta":{"other":{"k":[1,2]},"traceparent":"{TP}","b3":"x"}}}',
    ),
    _tp(
        "notification-no-params",
        b'{"jsonrpc":"2.0","method":"_x.dev/notify"}',
        '{"jsonrpc":"2.0","method":"_x.dev/notify","params":{"_meta":{"traceparent":"{TP}"}}}',
    ),
    _tp(
        "params-null",
        b'{"jsonrpc":"2.0","id":4,"method":"m/null","params":null}',
        '{"jsonrpc":"2.0","id":4,"method":"m/null","params":{"_meta":{"traceparent":"{TP}"}}}',
    ),
    _tp(
        "empty-meta",
        b'{"jsonrpc":"2.0","id":8,"method":"m/e","params":{"_meta":{ }}}',
        '{"jsonrpc":"2.0","id":8,"method":"m/e","params":{"_meta":{"traceparent":"{TP}" }}}',
    ),
    _tp(
        "duplicate-params",
        b'{"jsonrpc":"2.0","id":9,"method":"m/dup","params":{"a":1},"params":{"b":2}}',
        '{"jsonrpc":"2.0","id":9,"method":"m/dup","params":{"a":1},"params":{"b":2,"_meta":{"traceparent":"{TP}"}}}',
    ),
    _tp(
        "sender-context-kept-state-and-baggage",
        f'{{"jsonrpc":"2.0","id":11,"method":"m/ctx","params":{{"_meta":{{"traceparent":"{TP_VALID}",'
        f'"tracestate":"k=v","baggage":"a=b","x":1}}}}}}'.encode(),
        '{"jsonrpc":"2.0","id":11,"method":"m/ctx","params":{"_meta":{"traceparent":"{TP}",'
        '"tracestate":"k=v","baggage":"a=b","x":1}}}',
    ),
    _tp(
        "crlf",
        b'{"jsonrpc":"2.0","id":10,"method":"m/crlf","params":{}}\r',
        b'{"jsonrpc":"2.0","id":10,"method":"m/crlf","params":{"_meta":{"traceparent":"{TP}"}}}\r',
    ),
    _tp(
        "nan",
        b'{"jsonrpc":"2.0","method":"m/nan","params":{"v":NaN}}',
        '{"jsonrpc":"2.0","method":"m/nan","params":{"v":NaN,"_meta":{"traceparent":"{TP}"}}}',
    ),
    _tp(
        "two-megabytes",
        b'{"jsonrpc":"2.0","id":12,"method":"m/big","params":{"blob":"' + b"b" * 2_000_000 + b'"}}',
        b'{"jsonrpc":"2.0","id":12,"method":"m/big","params":{"blob":"'
        + b"b" * 2_000_000
        + b'","_meta":{"traceparent":"{TP}"}}}',
    ),
]

BIG = same(
    "fifty-megabytes", b'{"jsonrpc":"2.0","id":13,"method":"m/huge","params":{"blob":"' + b"h" * BIG_LINE_BYTES + b'"}}'
)

# Sent last, without a newline (it must arrive without one, injected like any other line).
FINAL = _tp(
    "final-line-without-newline",
    b'{"jsonrpc":"2.0","id":14,"method":"m/last","params":{"q":1}}',
    '{"jsonrpc":"2.0","id":14,"method":"m/last","params":{"q":1,"_meta":{"traceparent":"{TP}"}}}',
)


def stream(cases: list[Case], final: Case | None) -> bytes:
    """The bytes of ``cases`` as NDJSON, then ``final`` without a newline."""
    body = b"".join(c.sent + b"\n" for c in cases)
    return body + (final.sent if final is not None else b"")


def check(received: bytes, cases: list[Case], final: Case | None, injecting: bool) -> list[str]:
    """What differs between ``received`` and what ``cases`` say must arrive (empty: all exact)."""
    problems: list[str] = []
    lines = received.split(b"\n")
    want = [*cases, final] if final is not None else [*cases, None]
    if len(lines) != len(want):
        return [f"expected {len(want)} lines, got {len(lines)}"]
    for case, got in zip(want, lines, strict=True):
        if case is None:
            if got != b"":
                problems.append(f"trailing bytes {got[:80]!r}")
            continue
        expected = case.expected if injecting else case.sent
        if injecting and case.injected:
            match = TP_RE.search(got)
            if match is None:
                problems.append(f"{case.name}: no traceparent written: {got[:200]!r}")
                continue
            expected = expected.replace(b"{TP}", match.group(1))
        if got != expected:
            problems.append(f"{case.name}: got {got[:300]!r}, want {expected[:300]!r}")
    return problems
