"""The proxy's telemetry set-up from the OTEL_* environment (in process, exporting to a loopback receiver)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from acp_app import open_session, prompt
from harness import PROXY, PY_AGENT, base_env, proxied_client
from otlp_sink import OtlpSink

from acp_otel._metrics import HISTOGRAM_BUCKETS, make_instruments
from acp_otel._proxy import telemetry


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpSink]:
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    with OtlpSink() as s:
        for name, value in s.env().items():
            monkeypatch.setenv(name, value)
        yield s


def test_spans_and_metrics_export_with_the_resource(sink: OtlpSink, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    tel = telemetry.configure("derived-name", explicit_service_name=False)
    meter_provider = tel.add_meter_provider()
    assert meter_provider is not None
    tel.tracer().start_span("probe").end()
    meter_provider.get_meter("probe").create_counter("probe.count").add(1)
    instruments = make_instruments(meter_provider, "0")
    assert instruments is not None
    for histogram in (instruments.client_duration, instruments.turn_duration, instruments.tool_duration):
        histogram.record(1.5)
    assert tel.flush(10)
    spans = sink.wait_for(lambda s: any(x.name == "probe" for x in s))
    assert [s.service for s in spans if s.name == "probe"] == ["derived-name"]
    assert ("derived-name", "probe.count") in sink.metrics
    # Each histogram with its own buckets, on every supported SDK (the proxy's Views; an advisory alone is not
    # applied in full before SDK 1.32, and 1.31 would give the three the first one's)
    assert sink.histogram_bounds == {
        name: HISTOGRAM_BUCKETS[name]
        for name in ("acp.client.operation.duration", "gen_ai.invoke_agent.duration", "gen_ai.execute_tool.duration")
    }
    meter_provider.shutdown()
    tel.provider.shutdown()


@pytest.mark.parametrize(
    ("env", "explicit", "expected"),
    [
        ({"OTEL_SERVICE_NAME": "from-env"}, False, "from-env"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs"}, False, "from-attrs"),
        ({"OTEL_SERVICE_NAME": "from-env"}, True, "from-flag"),
        ({}, False, "from-flag"),
    ],
)
def test_service_name_precedence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], explicit: bool, expected: str
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    tel = telemetry.configure("from-flag", explicit_service_name=explicit)
    assert tel.provider.resource.attributes["service.name"] == expected
    tel.provider.shutdown()


@pytest.mark.parametrize("env", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}])
def test_tracing_off(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    tel = telemetry.configure("x", explicit_service_name=False)
    assert not tel.enabled and tel.flush(0)


@pytest.mark.e2e
async def test_proxy_exports_the_engines_metrics() -> None:
    with OtlpSink() as sink:
        env = base_env(**{**sink.env(), "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "200"})
        async with proxied_client([*PY_AGENT, "trace"], env, ["--service-name", "proxy"]) as run:
            session_id = await open_session(run.conn)
            await prompt(run.conn, session_id, "hello")
        assert run.returncode == 0
        assert any(service == "proxy" for service, _ in sink.metrics), sink.metrics


@pytest.mark.e2e
def test_a_service_name_in_the_resource_attributes_is_kept_by_the_proxy_and_its_agent(tmp_path: Path) -> None:
    """``OTEL_RESOURCE_ATTRIBUTES=service.name=...`` names the proxy's spans, and the agent gets no name derived
    from its command (its ``OTEL_SERVICE_NAME`` would win over the user's attribute)."""
    seen = tmp_path / "agent-service-name"
    code = (
        "import os, sys; sys.stdin.readline(); open(sys.argv[1], 'w').write(os.environ.get('OTEL_SERVICE_NAME', '-'))"
    )
    request = b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}\n'
    with OtlpSink() as sink:
        env = base_env(**sink.env(), OTEL_RESOURCE_ATTRIBUTES="service.name=mine,deployment.environment=test")
        done = subprocess.run(
            [*PROXY, "--", sys.executable, "-c", code, str(seen)],
            input=request,
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        spans = sink.wait_for(lambda s: any(x.attributes.get("acp.method.name") == "session/prompt" for x in s))
    assert {s.service for s in spans} == {"mine"}
    assert seen.read_text() == "-"


def test_flush_is_bounded_when_the_export_is_stuck() -> None:
    """A flush that never ends (an exporter stuck in a call) does not hold the proxy's exit: flush() returns
    False at its bound (no timing: an unbounded flush would never return)."""
    release = threading.Event()

    class Stuck:
        resource = None

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            release.wait()  # ignores its timeout, as a stuck exporter does
            return True

    try:
        assert telemetry.Telemetry(Stuck()).flush(0.2) is False
    finally:
        release.set()


def test_spans_exported_and_lost_are_counted() -> None:
    """What the loss line at exit reports: spans the exporter took, and spans it refused or failed on."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    answers = [SpanExportResult.SUCCESS, SpanExportResult.FAILURE, SpanExportResult.SUCCESS]

    class Exporter:
        def export(self, spans: Any) -> SpanExportResult:
            if not answers:
                raise ConnectionError("refused")
            return answers.pop(0)

    accounted = telemetry._Accounted("otlp", Exporter())
    assert accounted.export(["a", "b"]) is SpanExportResult.SUCCESS
    assert accounted.export(["c"]) is SpanExportResult.FAILURE
    assert accounted.export(["d", "e", "f"]) is SpanExportResult.SUCCESS
    with pytest.raises(ConnectionError):
        accounted.export(["g", "h"])
    assert (accounted.exported, accounted.lost) == (5, 3)
