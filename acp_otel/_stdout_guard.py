"""Keep console exporters off the protocol: in a process served over stdio, they write to stderr.

OpenTelemetry's console exporters (``ConsoleSpanExporter``, ``ConsoleMetricExporter``,
``ConsoleLogExporter``; what ``OTEL_TRACES_EXPORTER=console`` and friends configure) write to
``sys.stdout`` as it was when their module was imported. In an ACP agent run over stdio, stdout is the
protocol stream: pretty-printed span JSON there corrupts it (SDK 0.12 drops the lines without a word,
older releases stop reading). So when a connection starts receiving while both stdin and stdout are
pipes or sockets (the process is driven over its stdio), every console exporter of the global
tracer, meter and logger providers (and of the instrumentation's own tracer provider) that writes to
file descriptor 1 is pointed at ``sys.stderr`` instead.

The exporters are reached through attributes of the OpenTelemetry SDK that are not public API
(``_active_span_processor``, ``_batch_processor``, ``_sdk_config``, ...), listed with the other private
OpenTelemetry details in :data:`acp_otel._otel_private.SDK_EXPORTER_PATHS`; ``tests/test_otel_private.py``
checks that each SDK processor and reader still leads to its exporter, and
``test_console_exporters_never_reach_a_stdio_agents_stdout`` (``tests/test_telemetry_lifecycle.py``) runs a
real agent with console exporters over pipes.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from typing import Any

from . import _otel_private as otel_private

_log = logging.getLogger("acp_otel")

_MAX_DEPTH = 6


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def served_over_stdio() -> bool:
    """Both stdin and stdout are pipes or sockets: the process is driven over its stdio."""
    return _is_pipe_or_socket(0) and _is_pipe_or_socket(1)


def _writes_to_stdout(out: Any) -> bool:
    if out is sys.__stdout__ or out is sys.stdout:
        return True
    try:
        return bool(out.fileno() == 1)
    except Exception:
        return False


def console_exporters(root: Any) -> list[Any]:
    """The console exporters (class name ``Console...Exporter`` with an ``out`` stream) under ``root``."""
    found: list[Any] = []
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if obj is None or id(obj) in seen or depth > _MAX_DEPTH:
            return
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            for item in obj:
                visit(item, depth + 1)
            return
        name = type(obj).__name__
        if name.startswith("Console") and name.endswith("Exporter") and hasattr(obj, "out"):
            found.append(obj)
            return
        for attribute in otel_private.SDK_EXPORTER_PATHS:
            child = getattr(obj, attribute, None)
            if child is not None:
                visit(child, depth + 1)

    visit(root, 0)
    return found


def providers(extra: Any = None) -> list[Any]:
    """The global tracer, meter and logger providers, and ``extra``."""
    found = [extra]
    try:
        from opentelemetry import metrics, trace

        found += [trace.get_tracer_provider(), metrics.get_meter_provider()]
    except Exception:
        pass
    try:
        found.append(otel_private.logger_provider())
    except Exception:
        pass
    return [p for p in found if p is not None]


def redirect_console_exporters(extra_provider: Any = None) -> int:
    """Point console exporters that write to stdout at stderr; the number redirected."""
    moved = 0
    for provider in providers(extra_provider):
        for exporter in console_exporters(provider):
            if _writes_to_stdout(exporter.out):
                exporter.out = sys.stderr
                moved += 1
    if moved:
        _log.debug("acp_otel: %d console exporter(s) write to stderr: stdout carries the protocol", moved)
    return moved


def guard_stdout(extra_provider: Any = None) -> None:
    """In a process served over stdio, move console exporters to stderr (never raises)."""
    try:
        if served_over_stdio():
            redirect_console_exporters(extra_provider)
    except Exception:
        _log.debug("acp_otel: could not check the console exporters", exc_info=True)
