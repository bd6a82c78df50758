"""The raw-bytes splice of trace keys into ``params._meta`` (pure, no processes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from acp_otel._propagation import inject_into_params
from acp_otel._proxy.splice import SpliceError, splice_meta

TP = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def test_replaces_in_place_and_keeps_every_other_character() -> None:
    text = '{"id":1, "params" : {"a" : 1.0e0 ,"_meta":{"x":"\\u0041","traceparent":"old"} }, "method":"m"}'
    out = splice_meta(text, TP)
    assert out == text.replace('"old"', json.dumps(TP["traceparent"]))


def test_every_duplicate_of_a_key_in_meta_is_rewritten_and_the_last_params_is_used() -> None:
    text = '{"params":{"_meta":{}},"params":{"_meta":{"traceparent":"a","traceparent":"b"}}}'
    out = splice_meta(text, TP)
    assert out.startswith('{"params":{"_meta":{}},')
    assert json.loads(out)["params"]["_meta"] == TP
    assert out.count(TP["traceparent"]) == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"method":"m"}', '{"method":"m","params":{"_meta":{TP}}}'),
        ("{}", '{"params":{"_meta":{TP}}}'),
        ('{"method":"m","params":null}', '{"method":"m","params":{"_meta":{TP}}}'),
        ('{"params":{}}', '{"params":{"_meta":{TP}}}'),
        ('{"params":{"a":[1,{"_meta":2}]}}', '{"params":{"a":[1,{"_meta":2}],"_meta":{TP}}}'),
        ('{"params":{"_meta":null}}', '{"params":{"_meta":{TP}}}'),
        (' {"params":{"_meta":{"k":1}}} \r', ' {"params":{"_meta":{"k":1,TP}}} \r'),
    ],
)
def test_creates_what_is_missing(text: str, expected: str) -> None:
    pair = f"{json.dumps('traceparent')}:{json.dumps(TP['traceparent'])}"
    assert splice_meta(text, TP) == expected.replace("{TP}", "{" + pair + "}").replace("TP}", pair + "}")


@pytest.mark.parametrize("text", ['{"params":[1]}', '{"params":"s"}', '{"params":{"_meta":[]}}', "[1]"])
def test_refuses_shapes_the_engine_does_not_inject_into(text: str) -> None:
    with pytest.raises(SpliceError):
        splice_meta(text, TP)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    params=st.none() | st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    meta=st.none() | st.dictionaries(st.sampled_from(["traceparent", "tracestate", "k", "é"]), json_values),
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
)
@example(params={"_meta": []}, meta=None, indent=None, ascii_only=False)
def test_result_parses_to_what_the_engine_would_send(
    params: dict[str, Any] | None, meta: dict[str, Any] | None, indent: int | None, ascii_only: bool
) -> None:
    """Whatever the spelling, the spliced line means exactly the engine's own injection of the same keys."""
    if params is not None and meta is not None:
        params = {**params, "_meta": meta}
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "m"}
    if params is not None:
        message["params"] = params
    text = json.dumps(message, indent=indent, ensure_ascii=ascii_only)
    if params is not None and params.get("_meta") is not None and type(params["_meta"]) is not dict:
        # A _meta that is not an object (a generated "_meta" key): the engine leaves it, the splice refuses it.
        assert inject_into_params(params, dict(TP)) is params
        with pytest.raises(SpliceError):
            splice_meta(text, dict(TP))
        return
    out = splice_meta(text, dict(TP))
    expected = {**message, "params": inject_into_params(params, dict(TP))}
    assert json.loads(out) == expected
    # Nothing before "params" moved (the walk only ever writes inside or after it).
    head = text.find('"params"')
    assert head < 0 or out[:head] == text[:head]
