"""Small helpers to find spans in test output."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind


def find(spans: Iterable[ReadableSpan], name: str, kind: SpanKind | None = None) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name and (kind is None or s.kind == kind)]


def one(spans: Iterable[ReadableSpan], name: str, kind: SpanKind | None = None) -> ReadableSpan:
    found = find(spans, name, kind)
    assert len(found) == 1, f"expected one {name} {kind}, got {[(s.name, s.kind) for s in found]}"
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    return span.get_span_context().span_id


def trace_id(span: ReadableSpan) -> int:
    return span.get_span_context().trace_id


def all_text(spans: Iterable[ReadableSpan]) -> str:
    """Everything a backend would store about the spans, as one string (for privacy checks)."""
    parts: list[Any] = []
    for s in spans:
        parts.append(s.name)
        parts.append(s.status.description)
        parts.extend(f"{k}={v}" for k, v in (s.attributes or {}).items())
        for e in s.events:
            parts.append(e.name)
            parts.extend(f"{k}={v}" for k, v in (e.attributes or {}).items())
        parts.extend(f"{k}={v}" for k, v in (s.resource.attributes or {}).items())
    return "\n".join(str(p) for p in parts)
