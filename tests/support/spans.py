"""Small helpers to find spans in test output, and a span processor that tracks which spans are open.

``find``/``one`` work on SDK spans (``ReadableSpan``) and on spans an OTLP receiver decoded
(``acp_otel._demo.receiver.ReceivedSpan``); ``kind`` may be a ``SpanKind`` or its name ("SERVER").
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind


def _kind_name(kind: Any) -> str:
    return kind if isinstance(kind, str) else kind.name


def service_of(span: Any) -> str | None:
    name = getattr(span, "service_name", None)  # ReceivedSpan
    if name is None and getattr(span, "resource", None) is not None:
        name = (span.resource.attributes or {}).get("service.name")
    return name


def _named(span: Any, name: str) -> bool:
    """Called ``name``, or the span of method ``name`` named ``{method} {target}`` (a v1 turn: the agent)."""
    if span.name == name:
        return True
    return span.name.startswith(name + " ") and (span.attributes or {}).get("acp.method.name") == name


def name_of_method(span: Any) -> str:
    """The method a ``{method} {target}`` span stands for; any other span's own name."""
    method = (span.attributes or {}).get("acp.method.name")
    return method if type(method) is str and span.name.startswith(method + " ") else span.name


def find(spans: Iterable[Any], name: str, kind: SpanKind | str | None = None, service: str | None = None) -> list[Any]:
    """Spans called ``name`` (of that ``kind`` and ``service`` when given); a method name also finds its
    ``{method} {target}`` spans."""
    want = None if kind is None else _kind_name(kind)
    return [
        s
        for s in spans
        if _named(s, name)
        and (want is None or _kind_name(s.kind) == want)
        and (service is None or service_of(s) == service)
    ]


def one(spans: Iterable[Any], name: str, kind: SpanKind | str | None = None, service: str | None = None) -> Any:
    """The single span called ``name`` (of that ``kind`` and ``service``); fails on none or several."""
    spans = list(spans)
    found = find(spans, name, kind, service)
    assert len(found) == 1, (
        f"expected one {name} {kind} {service or ''}, got {len(found)} among "
        f"{[(s.name, _kind_name(s.kind), service_of(s)) for s in spans]}"
    )
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    return span.get_span_context().span_id


def trace_id(span: ReadableSpan) -> int:
    return span.get_span_context().trace_id


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _strings(item)
    else:
        yield str(value)


def _attribute_strings(attributes: Any, keys: bool, exclude: Iterable[str]) -> Iterator[str]:
    for key, value in (attributes or {}).items():
        if keys:
            yield key
        if key not in exclude:
            yield from _strings(value)


def span_strings(span: ReadableSpan, keys: bool = False, exclude: Iterable[str] = ()) -> Iterator[str]:
    """Every string an exported span carries: name, status description, attribute values of the span, its
    events and links, and of its resource (with ``keys``, the attribute keys too; not the values of the
    attributes named in ``exclude``)."""
    exclude = frozenset(exclude)
    yield span.name
    if span.status.description:
        yield span.status.description
    yield from _attribute_strings(span.attributes, keys, exclude)
    for event in span.events:
        yield event.name
        yield from _attribute_strings(event.attributes, keys, exclude)
    for link in span.links:
        yield from _attribute_strings(link.attributes, keys, exclude)
    yield from _attribute_strings(span.resource.attributes, keys, exclude)


def all_text(spans: Iterable[ReadableSpan]) -> str:
    """Everything a backend would store about the spans, keys included, as one string (for privacy checks)."""
    return "\n".join(text for span in spans for text in span_strings(span, keys=True))


class SpanCounter(SpanProcessor):
    """Counts spans started and ended; ``open`` maps each started, not yet ended span to (name, kind);
    ``started_as`` counts started spans by (name, kind)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.ended = 0
        self.open: dict[int, tuple[str, str]] = {}
        self.started_as: collections.Counter[tuple[str, str]] = collections.Counter()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        with self._lock:
            self.started += 1
            self.open[span.context.span_id] = (span.name, span.kind.name)
            self.started_as[(span.name, span.kind.name)] += 1
            if span.name != name_of_method(span):  # "{method} {target}" (a v1 turn): counted by method too
                self.started_as[(name_of_method(span), span.kind.name)] += 1

    def on_end(self, span: Any) -> None:
        with self._lock:
            self.ended += 1
            self.open.pop(span.context.span_id, None)

    def reset(self) -> None:
        with self._lock:
            self.started = self.ended = 0
            self.open.clear()
            self.started_as.clear()


async def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> None:
    """Wait (bounded) until ``predicate()`` is true; fail the test with ``what`` if it never is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"{what}: not met within {timeout} s"
        await asyncio.sleep(0.005)


async def wait_spans_closed(counter: SpanCounter, timeout: float = 5.0) -> None:
    """Wait (bounded) until no span is open; the caller asserts on ``counter.open`` afterwards."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while counter.open and loop.time() < deadline:
        await asyncio.sleep(0.01)


async def wait_started(counter: SpanCounter, name: str, kind: str, count: int = 1, timeout: float = 5.0) -> None:
    """Wait until ``count`` spans ``(name, kind)`` have started (ended or not)."""
    await wait_until(
        lambda: counter.started_as[(name, kind)] >= count,
        timeout,
        f"{count} {kind} {name} started (have {dict(counter.started_as)})",
    )
