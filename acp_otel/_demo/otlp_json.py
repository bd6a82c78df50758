"""OTLP JSON files in the format the OpenTelemetry Collector's ``file`` exporter writes.

Each line is one JSON object ``{"resourceSpans": [...]}`` using the OTLP/JSON mapping: lowerCamelCase
field names, enums as integers, 64-bit integers as strings and - unlike the generic protobuf JSON
mapping - ``traceId`` / ``spanId`` / ``parentSpanId`` as hex strings rather than base64.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, TracesData

from acp_otel._demo.receiver import ReceivedSpan, spans_from_resource_spans

__all__ = [
    "filter_resource_spans",
    "parse_otlp_json",
    "read_otlp_json",
    "resource_spans_to_otlp_json",
    "write_otlp_json",
]

# Only these keys carry ids; OTLP/JSON encodes them as hex. Attribute keys never appear as JSON object
# keys (they are values of "key" fields), so rewriting by key name is safe.
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _rewrite_ids(node: Any, convert: Callable[[str], str]) -> Any:
    if isinstance(node, dict):
        return {
            key: convert(value) if key in _ID_KEYS and isinstance(value, str) else _rewrite_ids(value, convert)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_ids(item, convert) for item in node]
    return node


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def filter_resource_spans(resource_spans: Iterable[ResourceSpans], trace_id: str | None = None) -> list[ResourceSpans]:
    """Keep only spans of ``trace_id`` (hex, or all spans without it); empty scopes/resources are dropped.

    The input is never modified. A resource whose spans are all kept is returned as it is (not copied);
    only resources that lose spans are rebuilt, with copies of the spans they keep.
    """
    wanted = bytes.fromhex(trace_id) if trace_id else None
    out: list[ResourceSpans] = []
    for rs in resource_spans:
        if not any(ss.spans for ss in rs.scope_spans):
            continue
        if wanted is None or all(ss.spans and all(s.trace_id == wanted for s in ss.spans) for ss in rs.scope_spans):
            out.append(rs)
            continue
        kept = ResourceSpans(schema_url=rs.schema_url)
        if rs.HasField("resource"):
            kept.resource.CopyFrom(rs.resource)
        for ss in rs.scope_spans:
            spans = [s for s in ss.spans if s.trace_id == wanted]
            if spans:
                scope = kept.scope_spans.add(schema_url=ss.schema_url, spans=spans)
                if ss.HasField("scope"):
                    scope.scope.CopyFrom(ss.scope)
        if kept.scope_spans:
            out.append(kept)
    return out


def resource_spans_to_otlp_json(resource_spans: Iterable[ResourceSpans]) -> dict[str, Any]:
    """Build the OTLP/JSON object ``{"resourceSpans": [...]}`` (hex ids, integer enums, int64 as strings)."""
    # Converted one by one: wrapping them in a TracesData would copy every message.
    as_dict = {"resourceSpans": [json_format.MessageToDict(rs, use_integers_for_enums=True) for rs in resource_spans]}
    rewritten: dict[str, Any] = _rewrite_ids(as_dict, _b64_to_hex)
    return rewritten


def write_otlp_json(
    resource_spans: Iterable[ResourceSpans], path: str | os.PathLike[str], trace_id: str | None = None
) -> int:
    """Write ``resource_spans`` (optionally only trace ``trace_id``) as one OTLP/JSON line to ``path``.

    The file is overwritten. Returns the number of spans written.
    """
    selected = filter_resource_spans(resource_spans, trace_id)
    line = json.dumps(resource_spans_to_otlp_json(selected), separators=(",", ":"), ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return sum(len(ss.spans) for rs in selected for ss in rs.scope_spans)


def parse_otlp_json(data: str | bytes | dict[str, Any]) -> TracesData:
    """Parse one OTLP/JSON traces object (a file line or an OTLP/HTTP JSON body) into ``TracesData``.

    Unknown fields are ignored so files from newer collectors still load.
    """
    obj = json.loads(data) if isinstance(data, (str, bytes, bytearray)) else data
    if not isinstance(obj, dict):
        raise ValueError("OTLP JSON must be an object with a 'resourceSpans' list")
    message = TracesData()
    json_format.ParseDict(_rewrite_ids(obj, _hex_to_b64), message, ignore_unknown_fields=True)
    return message


def read_otlp_json(path: str | os.PathLike[str], trace_id: str | None = None) -> list[ReceivedSpan]:
    """Read an OTLP/JSON lines file (ours or the Collector's) into :class:`ReceivedSpan` records.

    Blank lines are skipped; pass ``trace_id`` (hex) to keep a single trace.
    """
    spans: list[ReceivedSpan] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                spans.extend(spans_from_resource_spans(parse_otlp_json(line).resource_spans))
    if trace_id is not None:
        spans = [s for s in spans if s.trace_id == trace_id.lower()]
    return spans
