"""Reading an agent's span attributes (``acp_otel._proxy.proto_spans``): strings and integers as strings, other
values not at all."""

from __future__ import annotations

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.proto_spans import attribute, string_attribute


def test_an_attribute_is_read_as_a_string_from_a_string_or_an_integer_only() -> None:
    span = Span(name="agent work")
    span.attributes.add(key="ratio").value.double_value = 0.5
    span.attributes.add(key="count").value.int_value = 42
    span.attributes.add(key="name").value.string_value = "edit"
    assert attribute(span, ("ratio",)) is None
    assert attribute(span, ("count",)) == "42"
    assert attribute(span, ("ratio", "count")) == "42"  # the first of the keys with a usable value
    assert attribute(span, ("name",)) == "edit"
    assert string_attribute(span, "name") == "edit"
    assert string_attribute(span, "count") is None
    assert string_attribute(span, "absent") is None
