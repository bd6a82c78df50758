"""Collect every log record of a block, with acp_otel's own logger lowered to DEBUG."""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import Iterator


class LogCapture(logging.Handler):
    """Collects log records from every logger (root level lowered to DEBUG for ``acp_otel`` only)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def app_view(self) -> list[tuple[str, int, str, str | None]]:
        """What the application's logs say, minus our own debug lines (comparable across runs)."""
        out = []
        for r in self.records:
            if r.name.startswith("acp_otel") or r.levelno < logging.WARNING:
                continue
            exc = r.exc_info[0].__name__ if r.exc_info and r.exc_info[0] else None
            out.append((r.name, r.levelno, str(r.msg), exc))
        return out

    def our_failures(self) -> list[str]:
        """Records that show an exception inside acp_otel: our own failure logs, or a traceback whose
        innermost frame is in acp_otel (an exception raised by our code reaching the SDK's logging)."""
        bad = []
        for r in self.records:
            if r.name.startswith("acp_otel") and (r.exc_info or r.levelno >= logging.WARNING):
                bad.append(f"{r.name}: {r.getMessage()}")
            elif r.exc_info and r.exc_info[2] is not None:
                frames = traceback.extract_tb(r.exc_info[2])
                if frames and "acp_otel" in frames[-1].filename:
                    bad.append(f"{r.name}: {r.getMessage()} raised in {frames[-1].filename}:{frames[-1].lineno}")
        return bad


@contextlib.contextmanager
def capture_logs() -> Iterator[LogCapture]:
    handler = LogCapture()
    root = logging.getLogger()
    ours = logging.getLogger("acp_otel")
    old_level = ours.level
    ours.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        ours.setLevel(old_level)
