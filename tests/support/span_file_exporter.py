"""A span exporter that appends finished spans as JSON lines, so a child process can hand its spans back,
and ``make_provider``, the tracer provider every test process sets up."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult


def span_record(span: ReadableSpan) -> dict:
    ctx = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
        "parent_remote": bool(span.parent and span.parent.is_remote),
        "status": span.status.status_code.name,
        "description": span.status.description,
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()},
        "events": [e.name for e in span.events],
        "service": (span.resource.attributes or {}).get("service.name"),
        "ended": span.end_time is not None,
    }


def whole_span(span: ReadableSpan) -> dict[str, Any]:
    """The span as the SDK serializes it (``to_json()``: attributes, events, links, status, resource)."""
    return json.loads(span.to_json())


class JsonLinesExporter(SpanExporter):
    """Appends ``record(span)`` (default: :func:`span_record`) as one JSON line per span to ``path``."""

    def __init__(self, path: str, record: Callable[[ReadableSpan], dict[str, Any]] = span_record) -> None:
        self._path = path
        self._record = record

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as fh:
            for span in spans:
                fh.write(json.dumps(self._record(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def make_provider(exporter: SpanExporter, service: str | None = None, batch: bool = False) -> TracerProvider:
    """A tracer provider exporting to ``exporter`` (simple processor, or a batch one configured by OTEL_BSP_*)."""
    resource = Resource.create({"service.name": service}) if service else None
    provider = TracerProvider(resource=resource) if resource else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    return provider
