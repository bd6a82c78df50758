"""The proxy's telemetry set-up from the OTEL_* environment (in process, exporting to a loopback receiver)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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
