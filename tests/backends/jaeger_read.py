"""What Jaeger's HTTP API (``/api/traces/{id}``, the JSON its UI renders) shows, compared with what was sent.

Jaeger v2 turns each OTLP span into its own model: the span kind becomes the tag ``span.kind`` (``client``,
``server``, ``internal``, …), the status ``otel.status_code`` (``OK`` / ``ERROR``, with ``error=true``), the
parent a ``CHILD_OF`` reference, each link a ``FOLLOWS_FROM`` reference, each event a log whose field ``event``
is the event's name, and the resource's ``service.name`` the span's process. Jaeger's own ``warnings`` (clock
skew, unknown parents, duplicate span ids) are read by the test itself. ``problems`` lists every
difference between a span sent (as the tee kept it) and the span Jaeger returns.
"""

from __future__ import annotations

import json
from typing import Any

from otlp_tee import TeeSpan

KIND_TAG = {
    "CLIENT": "client",
    "SERVER": "server",
    "INTERNAL": "internal",
    "PRODUCER": "producer",
    "CONSUMER": "consumer",
}


def tags(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in items or []}


def same_value(sent: Any, shown: Any) -> bool:
    """An attribute's value as Jaeger shows it: scalars as they are, arrays and maps as JSON text."""
    if isinstance(sent, (list, dict)):
        try:
            return bool(json.loads(shown) == sent)
        except (TypeError, ValueError):
            return False
    if isinstance(sent, float) and isinstance(shown, (int, float)):
        return float(shown) == sent
    return bool(sent == shown)


def span_problems(sent: TeeSpan, shown: dict[str, Any], service: str) -> list[str]:
    where = f"{sent.name} ({sent.span_id})"
    problems = []
    if shown["operationName"] != sent.name:
        problems.append(f"{where}: operation {shown['operationName']!r}")
    if shown["traceID"].rjust(32, "0") != sent.trace_id:
        problems.append(f"{where}: trace {shown['traceID']}")
    shown_tags = tags(shown.get("tags"))
    if shown_tags.get("span.kind") != KIND_TAG.get(sent.kind):
        problems.append(f"{where}: span.kind {shown_tags.get('span.kind')!r}, sent {sent.kind}")
    status = shown_tags.get("otel.status_code", "UNSET")
    if status != sent.status or (sent.status == "ERROR") != (shown_tags.get("error") is True):
        problems.append(f"{where}: status {status!r} error={shown_tags.get('error')!r}, sent {sent.status}")
    differing = {k: (v, shown_tags.get(k)) for k, v in sent.attributes.items() if not same_value(v, shown_tags.get(k))}
    if differing:
        problems.append(f"{where}: attributes sent/shown {differing}")
    refs = shown.get("references") or []
    parents = [r["spanID"] for r in refs if r["refType"] == "CHILD_OF"]
    if parents != ([sent.parent_id] if sent.parent_id else []):
        problems.append(f"{where}: CHILD_OF {parents}, parent sent {sent.parent_id}")
    links = [(r["traceID"].rjust(32, "0"), r["spanID"]) for r in refs if r["refType"] == "FOLLOWS_FROM"]
    if links != sent.links:
        problems.append(f"{where}: FOLLOWS_FROM {links}, links sent {sent.links}")
    logs = [tags(log.get("fields")) for log in shown.get("logs") or []]
    expected_logs = [{"event": name, **attrs} for name, attrs in zip(sent.events, sent.event_attributes, strict=True)]
    if [log.get("event") for log in logs] != sent.events or any(
        not all(same_value(v, log.get(k)) for k, v in want.items())
        for want, log in zip(expected_logs, logs, strict=False)
    ):
        problems.append(f"{where}: logs {logs}, events sent {expected_logs}")
    if service != sent.resource.get("service.name"):
        problems.append(f"{where}: service {service!r}, resource {sent.resource.get('service.name')!r}")
    return problems


def trace_problems(trace: dict[str, Any], sent: list[TeeSpan]) -> list[str]:
    """Every span sent in this trace is in it once and as sent; nothing else is (warnings aside)."""
    problems = []
    processes = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
    shown: dict[str, list[dict[str, Any]]] = {}
    for span in trace["spans"]:
        shown.setdefault(span["spanID"], []).append(span)
    sent_ids = {s.span_id for s in sent}
    if len(sent_ids) != len(sent):
        problems.append("the same span id was sent twice")
    extra = set(shown) - sent_ids
    if extra:
        problems.append(f"spans in Jaeger that were not sent: {sorted(extra)}")
    for span in sent:
        copies = shown.get(span.span_id, [])
        if len(copies) != 1:
            problems.append(f"{span.name} ({span.span_id}) is in Jaeger {len(copies)} times")
            continue
        problems += span_problems(span, copies[0], processes[copies[0]["processID"]])
    return problems


# Jaeger's clock-skew adjuster as its /api/traces runs it (cmd/query/app/querysvc/internal/adjuster/clockskew.go,
# Jaeger v1.75.0 = 2.12.0), done here on what was sent, to know which spans it must warn about and with which delta.
# A span's host is its process's tag ``ip`` (a resource attribute ``ip``; the /api/v3 adjuster reads host.id, host.ip,
# host.name instead); where a child's host differs from the one carried down from its parent, or is empty
# (OpenTelemetry SDKs set no ``ip``), the delta is calculated afresh from the child's and its parent's times, else
# the parent's is kept. A non-zero delta is applied only up to ``max_clock_skew_adjust``, 0 by default, so every
# non-zero delta is a warning instead.
SKEW_WARNING = "clock skew adjustment disabled; not applying calculated delta of "


def host_key(span: TeeSpan) -> str:
    value = span.resource.get("ip")
    return value if isinstance(value, str) else ""


def skew_delta(child: TeeSpan, parent: TeeSpan) -> int:
    """Jaeger's calculateSkew, in nanoseconds: 0 when the child fits inside its parent."""
    parent_duration, child_duration = parent.end_ns - parent.start_ns, child.end_ns - child.start_ns
    if child_duration > parent_duration:
        return parent.start_ns - child.start_ns if child.start_ns < parent.start_ns else 0
    if child.start_ns >= parent.start_ns and child.end_ns <= parent.end_ns:
        return 0
    return parent.start_ns + (parent_duration - child_duration) // 2 - child.start_ns


def expected_skew(sent: list[TeeSpan]) -> dict[str, int]:
    """The spans of one trace Jaeger warns about (span id -> delta), walked from the roots as Jaeger does."""
    by_id = {s.span_id: s for s in sent}
    children: dict[str, list[TeeSpan]] = {}
    for span in sent:
        if span.parent_id in by_id:
            children.setdefault(span.parent_id, []).append(span)
    out: dict[str, int] = {}
    stack: list[tuple[TeeSpan, TeeSpan | None, str, int]] = [
        (s, None, host_key(s), 0) for s in sent if s.parent_id not in by_id
    ]
    while stack:
        span, parent, host, delta = stack.pop()
        if parent is not None and (host_key(span) != host or not host_key(span)):
            host, delta = host_key(span), skew_delta(span, parent)
        if delta:
            out[span.span_id] = delta
        stack += [(child, span, host, delta) for child in children.get(span.span_id, [])]
    return out


def go_duration(ns: int) -> str:
    """A duration as Go's time.Duration.String writes it (the delta in Jaeger's warning)."""
    if ns == 0:
        return "0s"
    sign, n = ("-" if ns < 0 else ""), abs(ns)

    def fraction(value: int, size: int) -> str:
        whole, rest = divmod(value, size)
        return f"{whole}.{str(rest).rjust(len(str(size)) - 1, '0').rstrip('0')}" if rest else str(whole)

    if n < 1_000:
        return f"{sign}{n}ns"
    if n < 1_000_000:
        return f"{sign}{fraction(n, 1_000)}µs"
    if n < 1_000_000_000:
        return f"{sign}{fraction(n, 1_000_000)}ms"
    hours, n = divmod(n, 3_600_000_000_000)
    minutes, n = divmod(n, 60_000_000_000)
    head = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "")
    return f"{sign}{head}{fraction(n, 1_000_000_000)}s"


def warnings_shown(trace: dict[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
    """Jaeger's warnings on a trace: the trace's own, and each span's (span id -> warnings)."""
    return list(trace.get("warnings") or []), {s["spanID"]: s["warnings"] for s in trace["spans"] if s.get("warnings")}
