"""Terminal waterfall rendering from hand-built spans."""

from __future__ import annotations

import re

import pytest

from acp_otel._demo.receiver import ReceivedSpan
from acp_otel._demo.waterfall import render_waterfall, strip_ansi, summary_line

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
MS = 1_000_000
BASE = 1_700_000_000_000 * MS  # a realistic unix-nanos origin


def span(
    span_id: str,
    parent: str,
    name: str,
    service: str,
    kind: str,
    start_ms: int,
    end_ms: int,
    error: str | None = None,
    trace_id: str = TRACE,
) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_time_unix_nano=BASE + start_ms * MS,
        end_time_unix_nano=BASE + end_ms * MS,
        status_code="ERROR" if error is not None else "UNSET",
        status_message=error or "",
        service_name=service,
    )


# The example client's service name, and the spawned agent's (derived from `python agent.py`).
CLIENT, AGENT = "acp-example-client", "agent"


def turn() -> list[ReceivedSpan]:
    # Deliberately shuffled: rendering must order by tree and start time, not input order.
    return [
        span("06", "02", "session/update", AGENT, "PRODUCER", 30, 31),
        span("03", "02", "tool_call", AGENT, "INTERNAL", 10, 20),
        span("01", "", "session/prompt", CLIENT, "CLIENT", 0, 100),
        span("05", "04", "fs/read_text_file", CLIENT, "SERVER", 12, 14),
        span("04", "03", "fs/read_text_file", AGENT, "CLIENT", 11, 15, error="file not found"),
        span("02", "01", "session/prompt", AGENT, "SERVER", 2, 98),
    ]


def span_lines(output: str) -> list[str]:
    """Span rows only: drop the header and error-detail lines."""
    lines = strip_ansi(output).splitlines()[1:]
    return [line for line in lines if re.search(r"\d ms", line)]


def names_of(output: str) -> list[str]:
    """The name column (tree prefix + markers + name) of every span row, cut at the header's service column."""
    service_col = strip_ansi(output).splitlines()[0].index("service")
    return [line[:service_col].rstrip() for line in span_lines(output)]


def services_of(output: str) -> list[str]:
    """The service column of every span row, located by the header's ``service`` label."""
    service_col = strip_ansi(output).splitlines()[0].index("service")
    return [line[service_col:].split()[0] for line in span_lines(output)]


def timeline_col(output: str) -> int:
    """Where the bar column starts: right after the header's (right-aligned) ``duration`` label."""
    header = strip_ansi(output).splitlines()[0]
    return header.index("duration") + len("duration") + 1


def bar_of(line: str, bar_start_col: int) -> tuple[int, int]:
    """(offset, length) of the █ run within the bar column."""
    bar = line[bar_start_col:]
    first = bar.index("█")
    return first, len(bar.rstrip()) - first


def test_tree_order_and_indentation() -> None:
    output = render_waterfall(turn(), width=100)
    lines = span_lines(output)
    assert names_of(output) == [
        "session/prompt",
        "└─ session/prompt",
        "   ├─ tool_call",
        "   │  └─ ✗ fs/read_text_file",
        "   │     └─ fs/read_text_file",
        "   └─ session/update",
    ]
    kinds = [re.search(r"\b(CLIENT|SERVER|PRODUCER|CONSUMER|INTERNAL)\b", line).group(1) for line in lines]
    assert kinds == ["CLIENT", "SERVER", "INTERNAL", "CLIENT", "SERVER", "PRODUCER"]
    assert services_of(output) == [CLIENT, AGENT, AGENT, AGENT, CLIENT, AGENT]


def test_durations_and_header() -> None:
    output = render_waterfall(turn(), width=100)
    header, *_ = output.splitlines()
    assert header.startswith("span") and "service" in header and "kind" in header and "duration" in header
    assert header.rstrip().endswith("100.0 ms")  # the timeline axis spans the whole trace
    lines = span_lines(output)
    assert "100.0 ms" in lines[0] and "96.00 ms" in lines[1] and "1.00 ms" in lines[5]


@pytest.mark.parametrize("width", [60, 80, 100, 140])
@pytest.mark.parametrize("color", [False, True])
def test_lines_fit_width_and_bars_are_proportional(width: int, color: bool) -> None:
    output = render_waterfall(turn(), width=width, color=color)
    plain = strip_ansi(output).splitlines()
    assert all(len(line) <= width for line in plain)

    lines = span_lines(output)
    # The bar column starts right after the duration column (taken from the header, not from any bar);
    # the root span fills it completely.
    bar_col = timeline_col(output)
    header = plain[0]
    assert header[bar_col:].startswith(("0 ms", "100.0 ms"))  # the axis (just its end label when narrow)
    assert all(line[bar_col - 1] == " " for line in lines)  # the column before the bars is the gap
    root_offset, root_len = bar_of(lines[0], bar_col)
    bar_width = width - bar_col
    assert root_offset == 0 and root_len == bar_width
    for line in lines:
        offset, length = bar_of(line, bar_col)
        assert length >= 1  # even the 1 ms span gets a cell
        assert offset + length <= bar_width
    # tool_call starts at 10% of the trace and lasts 10%.
    tool_offset, tool_len = bar_of(lines[2], bar_col)
    assert abs(tool_offset - 0.10 * bar_width) <= 1
    assert abs(tool_len - 0.10 * bar_width) <= 1
    # Later spans are further right.
    assert bar_of(lines[5], bar_col)[0] > bar_of(lines[2], bar_col)[0]


def test_error_marking_plain_and_color() -> None:
    plain = render_waterfall(turn(), width=100)
    lines = plain.splitlines()
    idx = next(i for i, line in enumerate(lines) if "✗ fs/read_text_file" in line)
    # The status message follows on its own line, keeping the tree rule to the child below it.
    assert lines[idx + 1].rstrip().endswith("✗ file not found")
    assert lines[idx + 1].startswith("   │     │")
    assert plain.count("✗") == 2  # one marker on the span line, one on the message line
    assert "\x1b[" not in plain

    colored = render_waterfall(turn(), width=100, color=True)
    red_lines = [line for line in colored.splitlines() if "\x1b[31m" in line]
    assert len(red_lines) == 2
    assert any("fs/read_text_file" in line for line in red_lines)
    assert any("file not found" in line for line in red_lines)
    # Colour only adds escapes: the visible text is the same layout.
    assert [a.rstrip() for a in strip_ansi(colored).splitlines()] == [b.rstrip() for b in lines]


def test_error_without_message_still_marked() -> None:
    spans = [span("01", "", "boom", CLIENT, "CLIENT", 0, 5, error="")]
    out = render_waterfall(spans)
    assert "✗ boom" in out and out.splitlines()[-1].strip() == "✗ error"


def test_orphans_become_roots() -> None:
    spans = [
        *turn(),
        span("09", "ffffffffffffffff", "late/agent-span", AGENT, "CONSUMER", 50, 60),
        span("0a", "09", "child-of-orphan", AGENT, "INTERNAL", 51, 52),
    ]
    output = render_waterfall(spans, width=120)
    lines = span_lines(output)
    names = names_of(output)
    # Roots are ordered by start time: the real root first, then the orphan with its own subtree.
    assert names[0] == "session/prompt"
    assert names[-2] == "…late/agent-span"
    assert names[-1] == "└─ child-of-orphan"
    assert "CONSUMER" in lines[-2]


def test_parent_cycle_is_broken_and_duplicates_shown_once() -> None:
    spans = [
        span("01", "02", "a", CLIENT, "CLIENT", 0, 10),
        span("02", "01", "b", CLIENT, "SERVER", 1, 9),
        span("02", "01", "b", CLIENT, "SERVER", 1, 9),  # e.g. an exporter retry delivered it twice
    ]
    # No span is reachable from a root; the earliest becomes a parent-missing root and the cycle is cut there.
    assert names_of(render_waterfall(spans)) == ["…a", "└─ b"]


def test_same_span_id_in_other_trace_is_not_a_parent() -> None:
    other = "0" * 31 + "1"
    spans = [
        span("01", "", "root", CLIENT, "CLIENT", 0, 10),
        span("02", "01", "foreign-child", AGENT, "SERVER", 1, 5, trace_id=other),
    ]
    assert names_of(render_waterfall(spans)) == ["root", "…foreign-child"]


def test_zero_duration_and_empty() -> None:
    assert render_waterfall([]) == "(no spans)"
    lines = span_lines(render_waterfall([span("01", "", "instant", CLIENT, "INTERNAL", 0, 0)], width=80))
    assert len(lines) == 1 and "█" in lines[0] and "0.00 ms" in lines[0]


def test_long_names_are_truncated_not_overflowing() -> None:
    spans = [span("01", "", "x" * 300, "s" * 80, "CLIENT", 0, 10)]
    out = render_waterfall(spans, width=100)
    assert all(len(line) <= 100 for line in out.splitlines())
    assert "…" in out.splitlines()[1]


def test_summary_line() -> None:
    assert summary_line(turn()) == (f"6 spans · 2 services ({CLIENT}, {AGENT}) · 1 error · trace {TRACE}")
    # A span delivered twice (exporter retry) is counted once.
    assert summary_line([*turn(), turn()[0]]) == summary_line(turn())
    one = [span("01", "", "only", CLIENT, "CLIENT", 0, 1)]
    assert summary_line(one) == f"1 span · 1 service ({CLIENT}) · trace {TRACE}"
    other = "ab" * 16
    mixed = [*one, span("02", "", "elsewhere", "", "SERVER", 5, 6, trace_id=other)]
    assert summary_line(mixed) == f"2 spans · 2 services ({CLIENT}, unknown_service) · traces {TRACE}, {other}"
