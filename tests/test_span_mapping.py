"""A profile's span maps applied to the agent's spans (``acp_otel._proxy.span_mapping``): each kind of rule (a value
set, the agent's own value kept; a default; a copy; a count; the AI SDK's provider translated), what each leaves
alone, and the spans counted as changed."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._agent_span_maps import SpanMap
from acp_otel._proxy.span_mapping import SpanMapper

OPERATION = "gen_ai.operation.name"
KEPT = "acp.agent_span.operation.name"


def _span(name: str, **attrs: Any) -> Span:
    span = Span(name=name, trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    for key, value in attrs.items():
        any_value = span.attributes.add(key=key.replace("__", ".")).value
        if isinstance(value, bool):
            any_value.bool_value = value
        elif isinstance(value, int):
            any_value.int_value = value
        elif isinstance(value, float):
            any_value.double_value = value
        else:
            any_value.string_value = value
    return span


def _apply(span_map: SpanMap, *spans: Span) -> int:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    mapper = SpanMapper([span_map])
    mapper.apply(request)
    for sent, mapped in zip(spans, request.resource_spans[0].scope_spans[0].spans, strict=True):
        sent.CopyFrom(mapped)
    return mapper.mapped


def _attrs(span: Span) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, str(kv.value.WhichOneof("value"))) for kv in span.attributes}


def _keys(span: Span) -> list[str]:
    return [kv.key for kv in span.attributes]


def test_a_set_value_replaces_the_agents_own_which_is_kept_as_it_was() -> None:
    rule = SpanMap("call", set=((OPERATION, "chat"),))
    absent, other, number, same, kept_before = (
        _span("call"),
        _span("call", gen_ai__operation__name="llm_call"),
        _span("call", gen_ai__operation__name=7),
        _span("call", gen_ai__operation__name="chat"),
        _span("call", gen_ai__operation__name="llm_call", acp__agent_span__operation__name="first"),
    )
    assert _apply(rule, absent, other, number, same, kept_before) == 4
    assert _attrs(absent) == {OPERATION: "chat"}
    assert _attrs(other) == {OPERATION: "chat", KEPT: "llm_call"}
    assert _attrs(number) == {OPERATION: "chat", KEPT: 7}  # of another type: replaced, kept with its type
    assert _attrs(same) == {OPERATION: "chat"} and _keys(same) == [OPERATION]
    assert _attrs(kept_before) == {OPERATION: "chat", KEPT: "first"}  # a value kept already is not overwritten
    assert _keys(other) == [OPERATION, KEPT] and _keys(kept_before) == [OPERATION, KEPT]


def test_a_default_is_added_only_where_the_span_has_no_value() -> None:
    rule = SpanMap("call", default=(("gen_ai.provider.name", "gcp.gemini"), ("gen_ai.system", "x")))
    absent, present = (
        _span("call", gen_ai__system="x"),
        _span("call", gen_ai__provider__name="openai", gen_ai__system="y"),
    )
    assert _apply(rule, absent, present) == 1
    assert _attrs(absent) == {"gen_ai.system": "x", "gen_ai.provider.name": "gcp.gemini"}
    assert _attrs(present) == {"gen_ai.provider.name": "openai", "gen_ai.system": "y"}


def test_a_copy_takes_a_string_or_an_integer_as_a_string_where_the_key_is_absent() -> None:
    rule = SpanMap("tool", copy=(("gen_ai.tool.call.id", "tool.call_id"),))
    spans = [
        _span("tool", tool__call_id="toolu_1"),
        _span("tool", tool__call_id=42),
        _span("tool", tool__call_id=True),  # neither: not copied
        _span("tool", tool__call_id=1.5),
        _span("tool", tool__call_id="toolu_2", gen_ai__tool__call__id="own"),  # the conventions' key wins
        _span("tool"),  # no source
    ]
    assert _apply(rule, *spans) == 2
    assert [_attrs(s).get("gen_ai.tool.call.id") for s in spans] == ["toolu_1", "42", None, None, "own", None]
    assert [len(s.attributes) for s in spans] == [2, 2, 1, 1, 2, 0]


def test_a_count_is_copied_as_an_integer_only_from_an_integer_where_the_key_is_absent() -> None:
    rule = SpanMap("call", count=(("gen_ai.usage.input_tokens", "input_token_count"),))
    spans = [
        _span("call", input_token_count=120),
        _span("call", input_token_count="120"),
        _span("call", input_token_count=120, gen_ai__usage__input_tokens=3),
        _span("call"),
    ]
    assert _apply(rule, *spans) == 1
    assert [_attrs(s).get("gen_ai.usage.input_tokens") for s in spans] == [120, None, 3, None]
    assert spans[0].attributes[1].value.WhichOneof("value") == "int_value"
    assert [len(s.attributes) for s in spans] == [2, 1, 2, 0]


def test_only_spans_of_the_maps_name_are_changed_and_counted_and_no_maps_change_nothing() -> None:
    rule = SpanMap("call", set=((OPERATION, "chat"),), default=(("gen_ai.provider.name", "p"),))
    spans = [_span("call"), _span("other"), _span("call", gen_ai__operation__name="chat", gen_ai__provider__name="q")]
    assert _apply(rule, *spans) == 1
    assert [_attrs(s) for s in spans] == [
        {OPERATION: "chat", "gen_ai.provider.name": "p"},
        {},
        {OPERATION: "chat", "gen_ai.provider.name": "q"},
    ]
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(_span("call"))
    empty = SpanMapper([])
    empty.apply(request)
    assert not empty and bool(SpanMapper([rule]))
    assert empty.mapped == 0 and len(request.resource_spans[0].scope_spans[0].spans[0].attributes) == 0


def test_the_count_of_spans_changed_adds_up_over_requests() -> None:
    mapper = SpanMapper([SpanMap("call", default=(("gen_ai.provider.name", "p"),))])
    for _ in range(3):
        request = ExportTraceServiceRequest()
        request.resource_spans.add().scope_spans.add().spans.extend([_span("call"), _span("call")])
        mapper.apply(request)
    assert mapper.mapped == 6


PROVIDER = "gen_ai.provider.name"


@pytest.mark.parametrize(
    ("ai_sdk", "conventions"),
    [
        ("openai.chat", "openai"),
        ("openai.responses", "openai"),
        ("anthropic.messages", "anthropic"),
        ("google.generative-ai", "gcp.gemini"),
        ("google.vertex.chat", "gcp.vertex_ai"),  # the longest known prefix, not google's
        ("mistral.chat", "mistral_ai"),
        ("xai.chat", "x_ai"),
        ("amazon-bedrock", "aws.bedrock"),
        ("local.chat", "local"),  # an OpenAI-compatible provider the user named: its name, without the API
        ("my.own.chat", "my.own"),
        ("openrouter", "openrouter"),  # no API part: the id as it is
        (".chat", ".chat"),  # no id before the API: the value as it is
    ],
)
def test_the_ai_sdks_provider_becomes_the_conventions_provider_name(ai_sdk: str, conventions: str) -> None:
    rule = SpanMap("call", ai_sdk_provider="gen_ai.system")
    span = _span("call", gen_ai__system=ai_sdk)
    assert _apply(rule, span) == 1
    assert _attrs(span) == {"gen_ai.system": ai_sdk, PROVIDER: conventions}  # the agent's own value stays


def test_the_ai_sdks_provider_leaves_a_provider_name_a_number_or_an_empty_value_alone() -> None:
    rule = SpanMap("call", ai_sdk_provider="gen_ai.system")
    named, number, empty, absent = (
        _span("call", gen_ai__system="openai.chat", gen_ai__provider__name="azure.ai.openai"),
        _span("call", gen_ai__system=3),
        _span("call", gen_ai__system=""),
        _span("call"),
    )
    assert _apply(rule, named, number, empty, absent) == 0
    assert _attrs(named)[PROVIDER] == "azure.ai.openai"
    assert all(PROVIDER not in _attrs(s) for s in (number, empty, absent))


def test_every_provider_name_the_maps_give_is_one_the_conventions_list() -> None:
    try:
        from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GenAiProviderNameValues
    except ImportError:  # the floors' semantic-conventions package (0.48b0) lists none; later releases do
        pytest.skip("this opentelemetry-semantic-conventions release lists no gen_ai.provider.name values")
    from acp_otel._agent_span_maps import AI_SDK_PROVIDERS, SPAN_MAPS

    given = set(AI_SDK_PROVIDERS.values())
    given |= {value for maps in SPAN_MAPS.values() for m in maps for key, value in m.default if key == PROVIDER}
    assert "gcp.gemini" in given and "openai" in given
    assert given <= {member.value for member in GenAiProviderNameValues}
