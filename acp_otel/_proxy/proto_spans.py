"""Small readers and writers of the ``opentelemetry.proto`` spans and logs the agent exports (no rules here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

Key = tuple[bytes, bytes]
"""A span's (trace id, span id)."""


class Entry:
    """A span taken out of its request with its resource and scope (held, or released into another request)."""

    __slots__ = ("resource", "schema", "scope", "scope_schema", "span")

    def __init__(self, span: Any, resource: Any, schema: str, scope: Any, scope_schema: str) -> None:
        self.span = span
        self.resource = resource
        self.schema = schema
        self.scope = scope
        self.scope_schema = scope_schema

    @classmethod
    def copied(cls, span: Any, resource: Any, schema: str, scope: Any, scope_schema: str) -> Entry:
        """An entry of copies (the request it came from may be changed or sent meanwhile)."""
        own = type(span)()
        own.CopyFrom(span)
        res = type(resource)()
        res.CopyFrom(resource)
        sco = type(scope)()
        sco.CopyFrom(scope)
        return cls(own, res, schema, sco, scope_schema)


def attribute(span: Any, keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` ``span`` (or a log record) carries as a string or an integer, as a string."""
    for kv in span.attributes:
        if kv.key in keys:
            value = kv.value
            which = value.WhichOneof("value")
            if which == "string_value":
                return str(value.string_value)
            if which == "int_value":
                return str(value.int_value)
    return None


def string_attribute(span: Any, key: str) -> str | None:
    """The string value of ``key`` on ``span`` (``None``: absent or not a string)."""
    for kv in span.attributes:
        if kv.key == key:
            return str(kv.value.string_value) if kv.value.WhichOneof("value") == "string_value" else None
    return None


def entries(request: ExportTraceServiceRequest) -> Iterator[Entry]:
    """Every span of ``request`` with its resource and scope (the request's own objects, not copies)."""
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield Entry(
                    span, resource_spans.resource, resource_spans.schema_url, scope_spans.scope, scope_spans.schema_url
                )


def spans(request: ExportTraceServiceRequest) -> Iterator[Span]:
    """Every span of ``request``."""
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            yield from scope_spans.spans


def remove(request: ExportTraceServiceRequest, keys: set[Key]) -> None:
    """Take the spans ``keys`` names (their ids as they are now) out of ``request``."""
    if not keys:
        return
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            kept = [s for s in scope_spans.spans if (s.trace_id, s.span_id) not in keys]
            if len(kept) != len(scope_spans.spans):
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)


def append(request: ExportTraceServiceRequest, released: list[Entry]) -> None:
    """Add released spans to ``request``, one resource and scope entry per span (their own)."""
    for held in released:
        resource_spans = request.resource_spans.add()
        resource_spans.resource.CopyFrom(held.resource)
        resource_spans.schema_url = held.schema
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(held.scope)
        scope_spans.schema_url = held.scope_schema
        scope_spans.spans.append(held.span)


def append_logs(request: ExportLogsServiceRequest, released: list[Entry]) -> None:
    """Add released log records (entries whose ``span`` is a log record) to ``request``, each with its own
    resource and scope."""
    for held in released:
        resource_logs = request.resource_logs.add()
        resource_logs.resource.CopyFrom(held.resource)
        resource_logs.schema_url = held.schema
        scope_logs = resource_logs.scope_logs.add()
        scope_logs.scope.CopyFrom(held.scope)
        scope_logs.schema_url = held.scope_schema
        scope_logs.log_records.append(held.span)
