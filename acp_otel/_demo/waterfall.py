"""Render a trace as a terminal waterfall (pure functions, no I/O).

Example output (``width=100``; the agent's service name ``agent`` comes from ``python agent.py``)::

    span                                   service            kind     duration 0 ms            52.10 ms
    session/prompt example-agent           acp-example-client CLIENT   52.10 ms ████████████████████████
    └─ session/prompt example-agent        agent              SERVER   50.00 ms ███████████████████████
       └─ ✗ fs/read_text_file              acp-example-client SERVER    2.10 ms   █
             ✗ file not found
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from acp_otel._demo.receiver import ReceivedSpan

__all__ = ["render_waterfall", "strip_ansi", "summary_line"]

_RED = "\x1b[31m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RESET = "\x1b[0m"
# Bars are colored per service so cross-process hops stand out; red is reserved for errors.
_SERVICE_COLORS = ("\x1b[36m", "\x1b[33m", "\x1b[35m", "\x1b[32m", "\x1b[34m", "\x1b[96m")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

_BAR = "█"
_ERROR_MARK = "✗"
_ORPHAN_MARK = "…"  # parent span was not received (e.g. it lives in a trace part that wasn't exported)
_KIND_WIDTH = 8  # len("INTERNAL")
_MAX_SERVICE_WIDTH = 24
_MIN_NAME_WIDTH = 12
_MIN_BAR_WIDTH = 10
_MIN_WIDTH = 60  # narrower requests are widened: below this the columns cannot all fit


def strip_ansi(text: str) -> str:
    """Remove ANSI color escapes (handy to measure or compare colored output)."""
    return _ANSI_RE.sub("", text)


def _format_ms(ns: int) -> str:
    ms = ns / 1_000_000
    if ms < 100:
        return f"{ms:.2f} ms"
    if ms < 10_000:
        return f"{ms:.1f} ms"
    return f"{ms:,.0f} ms"


def _fit(text: str, width: int) -> str:
    """Pad or truncate (with an ellipsis) to exactly ``width`` characters."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text.ljust(width)
    return text[: width - 1] + "…"


def _sort_key(span: ReceivedSpan) -> tuple[int, int, str, str]:
    # Longer spans first on equal start so an enclosing span precedes what it contains.
    return (span.start_time_unix_nano, -span.end_time_unix_nano, span.name, span.span_id)


def _unique(spans: Sequence[ReceivedSpan]) -> list[ReceivedSpan]:
    """Drop repeated (trace id, span id) pairs, keeping the first (an exporter retry can deliver a span twice)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for span in spans:
        key = (span.trace_id, span.span_id)
        if key not in seen:
            seen.add(key)
            out.append(span)
    return out


def _tree_rows(spans: Sequence[ReceivedSpan]) -> list[tuple[str, str, ReceivedSpan, bool]]:
    """Depth-first rows ``(prefix, detail_prefix, span, is_orphan)``.

    ``prefix`` draws the branch for the span's own line; ``detail_prefix`` indents lines that belong to the
    span (its error message) so the vertical rules to later siblings and to its own children keep running.
    """
    spans = _unique(spans)
    by_key = {(s.trace_id, s.span_id): s for s in spans}
    children: dict[tuple[str, str], list[ReceivedSpan]] = {}
    roots: list[ReceivedSpan] = []
    orphans: set[tuple[str, str]] = set()
    for span in spans:
        parent_key = (span.trace_id, span.parent_span_id)
        if span.parent_span_id and parent_key in by_key and parent_key != (span.trace_id, span.span_id):
            children.setdefault(parent_key, []).append(span)
        else:
            roots.append(span)
            if span.parent_span_id:
                orphans.add((span.trace_id, span.span_id))
    for kids in children.values():
        kids.sort(key=_sort_key)

    rows: list[tuple[str, str, ReceivedSpan, bool]] = []
    visited: set[tuple[str, str]] = set()

    def walk(span: ReceivedSpan, prefix: str, child_indent: str) -> None:
        key = (span.trace_id, span.span_id)
        if key in visited:  # duplicate ids or a malformed parent cycle: show each span once
            return
        visited.add(key)
        kids = [k for k in children.get(key, []) if (k.trace_id, k.span_id) not in visited]
        rows.append((prefix, child_indent + ("│  " if kids else "   "), span, key in orphans))
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            walk(kid, child_indent + ("└─ " if last else "├─ "), child_indent + ("   " if last else "│  "))

    for root in sorted(roots, key=_sort_key):
        walk(root, "", "")
    # Spans caught in a parent cycle are unreachable from any root; still show them rather than drop them.
    for span in sorted(spans, key=_sort_key):
        if (span.trace_id, span.span_id) not in visited:
            orphans.add((span.trace_id, span.span_id))
            walk(span, "", "")
    return rows


def render_waterfall(spans: list[ReceivedSpan], width: int = 100, color: bool = False) -> str:
    """Render spans of one trace as a tree with duration bars on a shared timeline.

    Each span line shows tree indentation, the name (``✗`` marks errors, ``…`` spans whose parent was not
    received), service name, kind, duration and a bar whose offset/length are proportional to its start and
    duration within the trace (at least one cell). An error's status message follows on its own line.
    Visible line length never exceeds ``width`` (minimum 60); with ``color=True`` ANSI colors are added (errors red).
    """
    if not spans:
        return "(no spans)"
    width = max(width, _MIN_WIDTH)
    rows = _tree_rows(spans)

    t0 = min(s.start_time_unix_nano for s in spans)
    t1 = max(max(s.end_time_unix_nano, s.start_time_unix_nano) for s in spans)
    total = max(t1 - t0, 1)

    names = [
        prefix + (f"{_ERROR_MARK} " if s.is_error else "") + (_ORPHAN_MARK if orphan else "") + s.name
        for prefix, _, s, orphan in rows
    ]
    durations = [_format_ms(s.duration_ns) for _, _, s, _ in rows]
    dur_w = max(len("duration"), *(len(d) for d in durations))
    service_w = min(max(len("service"), *(len(s.service_name) for s in spans)), _MAX_SERVICE_WIDTH)
    # On narrow terminals give up service-name width before the name and bar columns.
    service_w = max(
        len("service"), min(service_w, width - (_KIND_WIDTH + dur_w + 4 + _MIN_NAME_WIDTH + _MIN_BAR_WIDTH))
    )
    fixed = service_w + _KIND_WIDTH + dur_w + 4  # four single-space column gaps
    available = width - fixed
    name_w = min(max(len("span"), *(len(n) for n in names)), max(_MIN_NAME_WIDTH, available - _MIN_BAR_WIDTH))
    bar_w = max(1, width - fixed - name_w)

    lines = [_header(name_w, service_w, dur_w, bar_w, total, color)]
    palette: dict[str, str] = {}
    for (_, detail_prefix, span, _), name, duration in zip(rows, names, durations, strict=True):
        start_cell = min(bar_w - 1, int((span.start_time_unix_nano - t0) * bar_w // total))
        length = max(1, round(span.duration_ns * bar_w / total))
        length = min(length, bar_w - start_cell)
        bar = " " * start_cell + _BAR * length
        kind = span.kind if span.kind not in ("UNSPECIFIED", "") else "-"
        name_cell = _fit(name, name_w)
        text_cells = f"{_fit(span.service_name, service_w)} {_fit(kind, _KIND_WIDTH)} {duration.rjust(dur_w)}"
        if color:
            bar_color = (
                _RED
                if span.is_error
                else palette.setdefault(span.service_name, _SERVICE_COLORS[len(palette) % len(_SERVICE_COLORS)])
            )
            if span.is_error:
                name_cell = f"{_RED}{name_cell}{_RESET}"
            line = f"{name_cell} {text_cells} {bar_color}{bar}{_RESET}"
        else:
            line = f"{name_cell} {text_cells} {bar}"
        lines.append(line.rstrip() if not color else line)
        if span.is_error:
            message = span.status_message or "error"
            detail = _fit(f"{detail_prefix}{_ERROR_MARK} {message}", width).rstrip()
            lines.append(f"{_RED}{detail}{_RESET}" if color else detail)
    return "\n".join(lines)


def _header(name_w: int, service_w: int, dur_w: int, bar_w: int, total_ns: int, color: bool) -> str:
    end_label = _format_ms(total_ns)
    axis = "0 ms"
    gap = bar_w - len(axis) - len(end_label)
    timeline = axis + " " * gap + end_label if gap >= 1 else end_label[:bar_w]
    header = (
        f"{_fit('span', name_w)} {_fit('service', service_w)} {_fit('kind', _KIND_WIDTH)} "
        f"{'duration'.rjust(dur_w)} {timeline}"
    )
    header = header.rstrip()
    return f"{_BOLD}{header}{_RESET}" if color else header


def summary_line(spans: list[ReceivedSpan]) -> str:
    """One-line summary, e.g. ``17 spans · 2 services (acp-example-client, agent) · trace 4bf92f35...`` (full trace id).

    Errors are counted when present; several traces are listed as ``traces id1, id2``.
    """
    spans = _unique(spans)
    n = len(spans)
    services = sorted({s.service_name or "unknown_service" for s in spans})
    trace_ids: list[str] = []
    for span in sorted(spans, key=_sort_key):
        if span.trace_id not in trace_ids:
            trace_ids.append(span.trace_id)
    parts = [
        f"{n} span{'' if n == 1 else 's'}",
        f"{len(services)} service{'' if len(services) == 1 else 's'} ({', '.join(services)})",
    ]
    errors = sum(1 for s in spans if s.is_error)
    if errors:
        parts.append(f"{errors} error{'' if errors == 1 else 's'}")
    if len(trace_ids) == 1:
        parts.append(f"trace {trace_ids[0]}")
    elif trace_ids:
        parts.append(f"traces {', '.join(trace_ids)}")
    return " · ".join(parts)
