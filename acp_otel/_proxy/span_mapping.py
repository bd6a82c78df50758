"""The agent's profile's span maps (:mod:`acp_otel._agent_span_maps`) applied to its spans, in place, before they
are joined: every agent's model calls and tool calls then say so as the GenAI conventions do."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._agent_span_maps import SpanMap, ai_sdk_provider_name, original_key
from .proto_spans import spans

PROVIDER = "gen_ai.provider.name"


class SpanMapper:
    """Applies one agent's span maps (none: nothing is changed)."""

    def __init__(self, maps: Iterable[SpanMap]) -> None:
        self._by_name = {m.name: m for m in maps}
        self.mapped = 0  # spans changed

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def apply(self, request: Any) -> None:
        """Map the spans of an ``ExportTraceServiceRequest`` in place."""
        if not self._by_name:
            return
        for span in spans(request):
            found = self._by_name.get(span.name)
            if found is not None and _map(span, found):
                self.mapped += 1


def _map(span: Any, found: SpanMap) -> bool:
    changed = False
    for key, value in found.set:
        kv = _find(span, key)
        if kv is None:
            _add(span, key, value)
            changed = True
        elif kv.value.WhichOneof("value") != "string_value" or kv.value.string_value != value:
            kept = original_key(key)
            if _find(span, kept) is None:
                span.attributes.add(key=kept).value.CopyFrom(kv.value)
            kv = _find(span, key)  # (found again: the add may have moved it)
            kv.value.Clear()
            kv.value.string_value = value
            changed = True
    for key, value in found.default:
        if _find(span, key) is None:
            _add(span, key, value)
            changed = True
    for key, source in found.copy:
        origin = _find(span, source)
        if origin is not None and _find(span, key) is None:
            which = origin.value.WhichOneof("value")
            if which in ("string_value", "int_value"):  # the conventions' ids and names are strings
                _add(span, key, str(getattr(origin.value, which)))
                changed = True
    if found.ai_sdk_provider is not None and _find(span, PROVIDER) is None:
        origin = _find(span, found.ai_sdk_provider)
        if origin is not None and origin.value.WhichOneof("value") == "string_value" and origin.value.string_value:
            _add(span, PROVIDER, ai_sdk_provider_name(origin.value.string_value))
            changed = True
    for key, source in found.count:
        origin = _find(span, source)
        if origin is not None and origin.value.WhichOneof("value") == "int_value" and _find(span, key) is None:
            span.attributes.add(key=key).value.int_value = origin.value.int_value
            changed = True
    return changed


def _find(span: Any, key: str) -> Any:
    return next((kv for kv in span.attributes if kv.key == key), None)


def _add(span: Any, key: str, value: str) -> None:
    span.attributes.add(key=key).value.string_value = value
