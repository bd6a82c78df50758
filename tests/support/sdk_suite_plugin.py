"""pytest plugin: run the ACP SDK's own test suite with acp-otel tracing switched on.

Loaded by ``scripts/sdk_suite.py`` with ``-p sdk_suite_plugin`` (next to a copy of ``span_file_exporter.py``).
It instruments before any test runs (``pytest_configure``), with an in-memory exporter, and at the end
reports how many spans the suite produced, by kind, and how many tests produced at least one. A traced
run that produced no span at all fails, so a green traced run provably traced.

Set ``ACP_OTEL_SUITE_REPORT`` to a file path to also get the figures as JSON.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from span_file_exporter import make_provider

from acp_otel import AcpInstrumentor

_exporter = InMemorySpanExporter()
_provider = make_provider(_exporter)
_instrumentor = AcpInstrumentor()
_by_kind: collections.Counter[str] = collections.Counter()
_by_name: collections.Counter[str] = collections.Counter()
_tests_with_spans: set[str] = set()
_injected = 0


def _tally(nodeid: str | None) -> None:
    global _injected
    spans = _exporter.get_finished_spans()
    _exporter.clear()
    for span in spans:
        _by_kind[span.kind.name] += 1
        _by_name[span.name] += 1
        # A SERVER/CONSUMER span with a remote parent proves _meta propagation worked end to end.
        if span.parent is not None and span.parent.is_remote:
            _injected += 1
    if spans and nodeid:
        _tests_with_spans.add(nodeid)


def pytest_configure(config: pytest.Config) -> None:
    _instrumentor.instrument(tracer_provider=_provider)
    import acp
    import acp.connection

    config._acp_otel_sdk = (getattr(acp, "__file__", "?"), type(acp.connection.Connection.send_request).__name__)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    yield
    _tally(item.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _tally(None)
    total = sum(_by_kind.values())
    report = {
        "spans": total,
        "by_kind": dict(_by_kind),
        "remote_parented": _injected,
        "tests_with_spans": len(_tests_with_spans),
        "top_names": dict(_by_name.most_common(12)),
    }
    session.config._acp_otel_report = report
    path = os.environ.get("ACP_OTEL_SUITE_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, sort_keys=True)
    if session.testscollected and total == 0 and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # tracing was on but nothing was traced


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report = getattr(config, "_acp_otel_report", None)
    if report is None:
        return
    acp_file, hook_type = getattr(config, "_acp_otel_sdk", ("?", "?"))
    tr = terminalreporter
    tr.section("acp-otel tracing")
    tr.write_line(f"acp imported from {acp_file}; Connection.send_request is a {hook_type}")
    tr.write_line(
        f"{report['spans']} spans {report['by_kind']}, {report['remote_parented']} with a propagated remote "
        f"parent, from {report['tests_with_spans']} tests"
    )
    if report["spans"] == 0:
        tr.write_line("ERROR: tracing was on but no span was produced", red=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _instrumentor.is_instrumented_by_opentelemetry:
        _instrumentor.uninstrument()
    _provider.shutdown()
