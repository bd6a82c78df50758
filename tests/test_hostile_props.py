"""Property tests: random JSON-RPC traffic gets the same treatment with and without instrumentation.

Hypothesis generates messages (random methods, ids, params, ``_meta`` with random or near-valid trace
headers), which are written as raw NDJSON to a real agent and a real client over loopback sockets,
uninstrumented and then instrumented in the same process. Derandomized, so runs are reproducible.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hostile_corpus import BAGGAGE_VALUES, SPAN_ID, TP_VALID, TRACE_ID, raw_request
from hostile_harness import (
    assert_no_baggage_in_spans,
    assert_same_incoming,
    assert_same_outgoing,
    incoming_exchange,
    outgoing_exchange,
    run_off_then_on,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spans import SpanCounter

EXAMPLES = 150
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)

_hex = "0123456789abcdefABCDEF"
near_traceparent = st.builds(
    lambda v, t, s, f, extra: f"{v}-{t}-{s}-{f}{extra}",
    st.sampled_from(["00", "01", "ff", "0", "000", "cc", "0G"]),
    st.sampled_from([TRACE_ID, "0" * 32, TRACE_ID[:-1], TRACE_ID.upper()]) | st.text(_hex, min_size=30, max_size=34),
    st.sampled_from([SPAN_ID, "0" * 16, SPAN_ID + "0"]) | st.text(_hex, min_size=15, max_size=17),
    st.sampled_from(["01", "00", "1", "zz", "ff"]),
    st.sampled_from(["", "-", "-extra", " ", "\t"]),
)
trace_value = st.just(TP_VALID) | near_traceparent | _text | json_values
header_value = st.sampled_from(["k=v", "a=1,b=2", ",,,", "=", "k=%ZZ", "x" * 600]) | _text | json_values
baggage_value = st.sampled_from([f"k={BAGGAGE_VALUES[0]}", f"a=1,b={BAGGAGE_VALUES[1]};p"]) | header_value

meta_dicts = st.fixed_dictionaries(
    {},
    optional={
        "traceparent": trace_value,
        "tracestate": header_value,
        "baggage": baggage_value,
        "vendor.dev/x": json_values,
        "名": json_values,
    },
)
metas = meta_dicts | json_values

AGENT_METHODS = [
    "initialize",
    "authenticate",
    "session/new",
    "session/load",
    "session/prompt",
    "session/cancel",
    "session/set_mode",
    "session/list",
    "_known.dev/ping",
    "_vendor.dev/unknown",
    "no/such",
    "$/cancel_request",
]
CLIENT_METHODS = [
    "session/update",
    "session/request_permission",
    "fs/read_text_file",
    "fs/write_text_file",
    "terminal/create",
    "_known.dev/ping",
    "_vendor.dev/unknown",
    "no/such",
]

_fields = st.dictionaries(
    st.sampled_from(["sessionId", "cwd", "mcpServers", "prompt", "path", "content", "methodId", "update", "q"]),
    json_values,
    max_size=4,
)
_update = st.fixed_dictionaries(
    {"sessionUpdate": st.sampled_from(["agent_message_chunk", "plan", "_vendor.dev/kind", "mystery"]) | json_values},
    optional={"content": st.just({"type": "text", "text": "t"}) | json_values, "entries": st.just([]), "_meta": metas},
)


def params_strategy(with_update: bool) -> st.SearchStrategy[Any]:
    base = _fields
    if with_update:
        base = st.builds(lambda f, u: {**f, "sessionId": "s", "update": u}, _fields, _update) | _fields
    with_meta = st.builds(lambda f, m: {**f, "_meta": m}, base, metas)
    return with_meta | base | json_values


def messages(methods: list[str], with_update: bool) -> st.SearchStrategy[Any]:
    method = st.sampled_from(methods) | _text | json_values
    msg = st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "method": method},
        optional={
            "id": st.integers(min_value=-5, max_value=2**64)
            | _text
            | st.none()
            | st.floats(allow_nan=False, allow_infinity=False),
            "params": params_strategy(with_update),
        },
    )
    return msg


def _fresh(counter: SpanCounter, exporter: Any) -> None:
    """Function-scoped fixtures live across all of a test's examples: start each example from zero."""
    counter.reset()
    exporter.clear()


def _check_incoming(side: str, lines: list[Any], instrument: Any, counter: SpanCounter, exporter: Any) -> None:
    _fresh(counter, exporter)
    plain_run, traced = asyncio.run(run_off_then_on(instrument, incoming_exchange, side, lines, counter=counter))
    assert_same_incoming(plain_run, traced, repr(lines)[:300])
    assert not counter.open, counter.open
    assert counter.started == counter.ended
    assert exporter.get_finished_spans() or traced.disconnected  # the sentinel request at least was traced
    assert_no_baggage_in_spans(exporter.get_finished_spans(), BAGGAGE_VALUES, repr(lines)[:300])


@SETTINGS
@given(lines=st.lists(messages(AGENT_METHODS, with_update=False), min_size=1, max_size=4))
def test_random_messages_to_agent(lines: list[Any], instrument: Any, counter: SpanCounter, exporter: Any) -> None:
    _check_incoming("agent", lines, instrument, counter, exporter)


@SETTINGS
@given(lines=st.lists(messages(CLIENT_METHODS, with_update=True), min_size=1, max_size=4))
def test_random_messages_to_client(lines: list[Any], instrument: Any, counter: SpanCounter, exporter: Any) -> None:
    _check_incoming("client", lines, instrument, counter, exporter)


_response = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0")},
    optional={
        "id": st.just("SAME") | st.integers(-2, 3) | _text | st.none(),
        "result": json_values,
        "error": st.fixed_dictionaries({}, optional={"code": json_values, "message": json_values, "data": json_values})
        | st.none(),
    },
)


@SETTINGS
@given(
    answers=st.lists(_response, max_size=3),
    params=st.none() | params_strategy(with_update=False),
    method=st.sampled_from(["session/new", "_vendor.dev/q", "session/prompt", "$/x"]),
)
def test_random_responses_to_client_requests(
    answers: list[Any], params: Any, method: str, instrument: Any, counter: SpanCounter, exporter: Any
) -> None:
    def respond(request: dict[str, Any]) -> list[Any]:
        return [{**a, "id": request["id"]} if a.get("id") == "SAME" else a for a in answers]

    _fresh(counter, exporter)
    plain_run, traced = asyncio.run(
        run_off_then_on(instrument, outgoing_exchange, "client", raw_request(method, params), respond, counter=counter)
    )
    assert_same_outgoing(plain_run, traced, repr((method, params, answers))[:300])
    assert traced.request_seen
    assert not counter.open, counter.open
    assert counter.started == counter.ended == 1
    assert [s.kind.name for s in exporter.get_finished_spans()] == ["CLIENT"]
