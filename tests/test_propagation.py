"""Propagation is a set of small pure functions: inject into a copy, extract and strip."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from acp_otel import _propagation as propagation
from acp_otel._semconv import RESERVED_META_KEYS

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _context() -> context.Context:
    span_context = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(span_context))
    return baggage.set_baggage("user", "alice", ctx)


def test_carrier_has_w3c_headers() -> None:
    carrier = propagation.carrier_for(_context())
    assert carrier["traceparent"] == TP
    assert carrier["baggage"] == "user=alice"


def test_inject_copies_and_keeps_other_keys() -> None:
    params = {"sessionId": "s", "_meta": {"zed.dev/debugMode": True}}
    before = copy.deepcopy(params)
    out = propagation.inject_into_params(params, {"traceparent": TP})
    assert params == before
    assert out == {"sessionId": "s", "_meta": {"zed.dev/debugMode": True, "traceparent": TP}}
    assert out["_meta"] is not params["_meta"]


def test_inject_none_and_non_objects() -> None:
    assert propagation.inject_into_params(None, {"traceparent": TP}) == {"_meta": {"traceparent": TP}}
    cases: list[Any] = [[1, 2], "text", 3, {"_meta": "x"}, {"_meta": [1]}]
    for params in cases:
        assert propagation.inject_into_params(params, {"traceparent": TP}) is params
    params = {"a": 1}
    assert propagation.inject_into_params(params, {}) is params


def test_inject_copies_only_changed_levels() -> None:
    nested = {"deep": [1, 2, 3]}
    params = {"prompt": nested, "_meta": {"k": nested}}
    out = propagation.inject_into_params(params, {"traceparent": TP})
    assert out["prompt"] is nested and out["_meta"]["k"] is nested


def test_extract_and_strip() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": 1, "_meta": {"traceparent": TP, "baggage": "user=alice", "other": 1}},
    }
    before = copy.deepcopy(message)
    stripped, carrier = propagation.strip_and_extract(message)
    assert carrier == {"traceparent": TP, "baggage": "user=alice"}
    ctx = propagation.context_from_carrier(carrier)
    assert trace.get_current_span(ctx).get_span_context().span_id == 0xB7AD6B7169203331
    assert baggage.get_baggage("user", ctx) == "alice"
    assert message == before  # the original (possibly shared with the sender) is untouched
    assert stripped["params"] == {"protocolVersion": 1, "_meta": {"other": 1}}


def test_strip_drops_empty_meta_and_non_string_values() -> None:
    message = {"method": "x", "params": {"a": 1, "_meta": {"traceparent": 5, "tracestate": None}}}
    assert propagation.strip_and_extract(message) == ({"method": "x", "params": {"a": 1}}, None)


def test_nothing_to_strip_returns_same_object() -> None:
    for message in ({"method": "x"}, {"method": "x", "params": [1]}, {"params": {"_meta": {"k": 1}}}, "junk", None):
        stripped, carrier = propagation.strip_and_extract(message)
        assert stripped is message and carrier is None


def test_no_carrier_gives_an_empty_context_not_the_ambient_one() -> None:
    token = context.attach(_context())
    try:
        carriers: tuple[dict[str, str] | None, ...] = (None, {})
        for carrier in carriers:
            ctx = propagation.context_from_carrier(carrier)
            assert not trace.get_current_span(ctx).get_span_context().is_valid
            assert baggage.get_baggage("user", ctx) is None
    finally:
        context.detach(token)


def test_invalid_traceparent_gives_empty_context() -> None:
    ctx = propagation.context_from_carrier({"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    assert not trace.get_current_span(ctx).get_span_context().is_valid


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_value = st.recursive(
    json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)
)
meta_key = st.sampled_from(["traceparent", "tracestate", "baggage", "b3", "other", "zed.dev/x"]) | st.text(max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(meta_key, json_value, max_size=5),
    st.dictionaries(st.text(max_size=5).filter(lambda k: k != "_meta"), json_value, max_size=3),
    st.sampled_from([RESERVED_META_KEYS, (*RESERVED_META_KEYS, "b3")]),
)
def test_strip_matches_its_specification_and_never_mutates(
    meta: dict[str, Any], rest: dict[str, Any], keys: tuple[str, ...]
) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {**rest, "_meta": meta}}
    before = copy.deepcopy(message)
    stripped, carrier = propagation.strip_and_extract(message, keys)
    assert message == before
    left = {k: v for k, v in meta.items() if k not in keys}
    expected_carrier = {k: meta[k] for k in keys if type(meta.get(k)) is str} or None
    assert carrier == expected_carrier
    if len(left) == len(meta):  # nothing to strip: the very same message
        assert stripped is message
        return
    expected_params = {**rest, "_meta": left} if left else rest
    assert stripped == {**message, "params": expected_params}
    assert stripped is not message and stripped["params"] is not message["params"]
    if left:
        assert stripped["params"]["_meta"] is not meta
