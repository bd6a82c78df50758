"""What the proxy says at exit about its telemetry: the warnings and exporters' errors logged while it runs.

Light (``logging`` and ``re`` only): collecting starts before the settings are read, and those are read before
the OpenTelemetry SDK is imported (see :mod:`.process`).
"""

from __future__ import annotations

import logging
import re


class Collector(logging.Handler):
    """Keeps the warnings of ``acp_otel`` (rejected settings, unknown exporters) and the errors of the
    OpenTelemetry exporters, for the exit report."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []
        self.export_errors: list[str] = []  # the span exporters'
        self.metric_errors: list[str] = []  # the metric exporters'

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = strip_prefix(record.getMessage()).splitlines()[0] if record.getMessage() else ""
        except Exception:
            return
        if record.name.split(".")[0] == "acp_otel":
            target = self.warnings
        else:
            target = self.metric_errors if "metric" in record.name else self.export_errors
        if message and message not in target and len(target) < 20:
            target.append(message)


_PREFIX_RE = re.compile(r"^(?:acp[_-]otel(?: proxy)?: )+")


def strip_prefix(message: str) -> str:
    """A diagnostic without its ``acp_otel: `` / ``acp_otel proxy: `` prefixes (the handler adds one)."""
    return _PREFIX_RE.sub("", message)


def install_collector() -> Collector:
    """Start collecting (again: a collector installed before is replaced) the warnings of ``acp_otel`` and the
    errors of the OpenTelemetry exporters."""
    collector = Collector()
    for name in ("acp_otel", "opentelemetry.exporter"):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, Collector)]:  # configured again (tests)
            logger.removeHandler(old)
        logger.addHandler(collector)
    return collector
