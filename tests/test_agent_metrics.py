"""Metrics of the agent layer on a real client and agent: read back with ``InMemoryMetricReader`` and
exported over OTLP/HTTP to a loopback receiver; bounded attributes, never ids or content."""

from __future__ import annotations

import http.server
import threading
import time
from typing import Any

import pytest
from acp_app import SECRET, TraceAgent, TraceClient, open_session, prompt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
from sdk_versions import PER_HISTOGRAM_BUCKETS
from spans import wait_spans_closed
from test_agent_turns import USAGE, ScriptAgent, _tool, _tool_update

from acp_otel import _metrics as acp_metrics

CHUNK = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": SECRET}}
SCRIPT = [
    CHUNK,
    _tool("tool-a", kind="edit"),
    ("permission", "tool-a"),
    _tool_update("tool-a", "completed"),
    _tool("tool-b", kind="fetch"),
    _tool_update("tool-b", "failed"),
    _tool("tool-c", kind="_vendor_kind"),  # never completed; an unknown kind
]


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "acp_otel"
            for metric in sm.metrics:
                assert metric.unit in ("s", "{token}"), metric.name
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


async def _turn(pair: Any, counter: Any, agent: Any) -> Any:
    p = await pair(agent, TraceClient())
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "hello")
    await wait_spans_closed(counter)
    return p


async def test_metrics_read_back(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    started = time.monotonic()
    p = await _turn(pair, counter, ScriptAgent(SCRIPT, usage=USAGE))
    try:
        await p.client_conn.ext_method("test.dev/missing", {})
    except Exception:
        pass
    await wait_spans_closed(counter)
    elapsed = time.monotonic() - started  # every interval recorded lies inside this one
    points = _points(reader)

    client = {pt.attributes["acp.method.name"]: pt for pt in points["acp.client.operation.duration"]}
    server = {pt.attributes["acp.method.name"]: pt for pt in points["acp.server.operation.duration"]}
    for side in (client, server):  # both sides of one connection pair recorded in this process
        assert {"initialize", "session/new", "session/prompt", "session/request_permission"} <= set(side)
        assert side["session/prompt"].count == 1
        assert side["_test.dev/missing"].attributes["error.type"] == "-32601"
        assert "error.type" not in side["session/prompt"].attributes

    # The turn: gen_ai.invoke_agent.duration by the side closest to the agent (the traced agent), the GenAI
    # client-side duration by the editor in front of it; the same attributes. Each turn counted once per metric.
    (turns,) = points["gen_ai.invoke_agent.duration"]
    (client_turns,) = points["gen_ai.client.operation.duration"]
    for pt in (turns, client_turns):
        assert dict(pt.attributes) == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "test-agent",
            "acp.stop_reason": "end_turn",
        }
        assert pt.count == 1 and 0 < pt.sum <= elapsed
    (ttfc,) = points["acp.turn.time_to_first_chunk"]  # the agent's side only, like the turn's duration
    assert ttfc.count == 1 and 0 < ttfc.sum <= turns.sum
    assert dict(ttfc.attributes) == {"gen_ai.agent.name": "test-agent"}

    tools = {pt.attributes["acp.tool_call.kind"]: pt for pt in points["gen_ai.execute_tool.duration"]}
    assert set(tools) == {"edit", "fetch", "_OTHER"}  # one tool span each (the agent's); unknown kind bounded
    assert (
        tools["edit"].attributes["acp.tool_call.status"] == "completed" and "error.type" not in tools["edit"].attributes
    )
    assert tools["fetch"].attributes["error.type"] == "tool_error"
    assert tools["_OTHER"].attributes["acp.tool_call.status"] == "pending"  # ended with the turn
    assert all(pt.count == 1 for pt in tools.values())
    assert all(pt.attributes["gen_ai.operation.name"] == "execute_tool" for pt in tools.values())
    assert tools["edit"].attributes["gen_ai.tool.name"] == "edit"  # nothing names it: the kind stands in
    assert tools["_OTHER"].attributes["gen_ai.tool.name"] == "_vendor_kind"  # the kind as sent (bounded as names)
    assert all(pt.attributes["gen_ai.agent.name"] == "test-agent" for pt in tools.values())
    assert all(0 < pt.sum <= elapsed for pt in tools.values())  # from the tool's first sighting to its end

    # Token counters: recorded once across the two sides (by the traced agent's side), agent name only.
    (inputs,) = points["acp.turn.usage.input_tokens"]
    (outputs,) = points["acp.turn.usage.output_tokens"]
    assert (inputs.value, outputs.value) == (120, 34)
    assert dict(inputs.attributes) == dict(outputs.attributes) == {"gen_ai.agent.name": "test-agent"}

    # No ids and no content in any metric attribute.
    text = repr([dict(pt.attributes) for pts in points.values() for pt in pts])
    for forbidden in ("sess-1", "tool-a", "tool-b", "tool-c", SECRET, "jsonrpc.request.id", "gen_ai.conversation.id"):
        assert forbidden not in text


async def test_method_names_are_bounded(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, pair: Any, counter: Any
) -> None:
    instrument(meter_provider=meter_provider)
    p = await pair(TraceAgent(), TraceClient())
    await open_session(p.client_conn)
    for i in range(acp_metrics.MAX_EXTENSION_METHODS + 5):
        try:
            await p.client_conn._conn.send_request(f"_x.dev/m{i}", {})
        except Exception:
            pass
    try:
        await p.client_conn._conn.send_request("not/a/standard/method", {})
    except Exception:
        pass
    await wait_spans_closed(counter)
    names = {pt.attributes["acp.method.name"] for pt in _points(reader)["acp.client.operation.duration"]}

    extensions = {n for n in names if n.startswith("_x.dev/")}
    assert len(extensions) == acp_metrics.MAX_EXTENSION_METHODS
    assert "_OTHER" in names and "not/a/standard/method" not in names


async def test_global_meter_provider_is_used_without_the_keyword(
    instrument: Any, reader: InMemoryMetricReader, meter_provider: MeterProvider, pair: Any, counter: Any
) -> None:
    from opentelemetry import metrics

    from acp_otel._metrics import make_instruments

    # The global provider can be set only once per process: check the lookup make_instruments does.
    assert make_instruments(None, "0") is not None  # the global (proxy) provider never fails
    instruments = make_instruments(meter_provider, "0")
    assert instruments is not None
    instruments.turn_duration.record(1.5, {"gen_ai.agent.name": "a"})
    assert _points(reader)["gen_ai.invoke_agent.duration"][0].sum == 1.5
    assert metrics.get_meter_provider() is not None


# Every histogram of Instruments, by attribute.
HISTOGRAMS = (
    "client_duration",
    "server_duration",
    "turn_duration",
    "client_turn_duration",
    "tool_duration",
    "first_chunk",
)


class _MeterBefore130:
    """A real SDK meter behind the API's signature before 1.30: ``create_histogram`` without the bucket advisory
    (the newer API cannot be made to lack it; on the floors, ``nox -s floors``, the real 1.27 API is used too)."""

    def __init__(self, meter: Any) -> None:
        self._meter = meter

    def create_histogram(self, name: str, unit: str = "", description: str = "") -> Any:
        return self._meter.create_histogram(name, unit=unit, description=description)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._meter, name)


def test_every_instrument_without_the_bucket_advisory(
    reader: InMemoryMetricReader, meter_provider: MeterProvider, monkeypatch: Any, caplog: Any
) -> None:
    """An API without ``explicit_bucket_boundaries_advisory`` (before 1.30): every histogram and counter is still
    made and records (the SDK's default buckets), and the missing advisory is said once, as a warning."""
    monkeypatch.setattr(acp_metrics, "_no_advisory_said", False)
    meter = _MeterBefore130(meter_provider.get_meter("acp_otel"))
    with caplog.at_level("WARNING", logger="acp_otel"):
        acp_metrics.Instruments(meter, buckets_from_views=True)  # the proxy's provider: its Views set the buckets
        assert not [r for r in caplog.records if "bucket advisory" in r.getMessage()]
        acp_metrics.Instruments(meter)
        instruments = acp_metrics.Instruments(meter)
    said = [r for r in caplog.records if "bucket advisory" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    for histogram in HISTOGRAMS:
        getattr(instruments, histogram).record(2.5, {"gen_ai.agent.name": "a"})
    for counter in ("input_tokens", "output_tokens", "cost"):
        getattr(instruments, counter).add(3, {"gen_ai.agent.name": "a"})
    data = reader.get_metrics_data()
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    usage = {"acp.turn.usage.input_tokens", "acp.turn.usage.output_tokens", "acp.turn.usage.cost"}
    assert set(metrics) == {*acp_metrics.HISTOGRAM_BUCKETS, *usage}
    for name in acp_metrics.HISTOGRAM_BUCKETS:
        (point,) = metrics[name].data.data_points
        assert point.count == 1 and point.sum == 2.5
        assert tuple(point.explicit_bounds) != acp_metrics.HISTOGRAM_BUCKETS[name]  # the SDK's default buckets


async def test_records_start_when_a_provider_is_set_behind_the_proxy(
    instrument: Any, reader: InMemoryMetricReader, meter_provider: MeterProvider, pair: Any, counter: Any
) -> None:
    """Instruments made from the API's proxy (the global provider before one is set) record nothing, and the
    engine skips their records; once a provider is set behind the proxy, the next turn is recorded in full."""
    from opentelemetry.metrics._internal import _ProxyMeterProvider  # what get_meter_provider() is until set

    proxy = _ProxyMeterProvider()  # a fresh one: the global one can be set only once per process
    instrument(meter_provider=proxy)
    p = await pair(ScriptAgent(SCRIPT, usage=USAGE), TraceClient())
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "before")
    await wait_spans_closed(counter)
    assert _points(reader) == {}  # nothing reached the reader: no provider behind the proxy yet
    proxy.on_set_meter_provider(meter_provider)  # what set_meter_provider() does to the global proxy
    await prompt(p.client_conn, session_id, "after")
    await wait_spans_closed(counter)
    points = _points(reader)
    turns = points["gen_ai.invoke_agent.duration"] + points["gen_ai.client.operation.duration"]
    assert sum(pt.count for pt in turns) == 2  # the second turn, on both sides (the first one is not there)
    for name in ("acp.client.operation.duration", "acp.server.operation.duration"):
        prompts = [pt for pt in points[name] if pt.attributes["acp.method.name"] == "session/prompt"]
        assert [pt.count for pt in prompts] == [1], name
    assert {pt.attributes["acp.tool_call.status"] for pt in points["gen_ai.execute_tool.duration"]} >= {"completed"}
    # the second turn's tokens, once (the agent's side)
    assert [pt.value for pt in points["acp.turn.usage.input_tokens"]] == [USAGE["inputTokens"]]


class _MetricsReceiver(http.server.ThreadingHTTPServer):
    """A minimal OTLP/HTTP metrics endpoint on 127.0.0.1 that decodes what it receives."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
            ExportMetricsServiceResponse,
        )

        self.requests: list[Any] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    import gzip

                    body = gzip.decompress(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                payload = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/metrics" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        super().__init__(("127.0.0.1", 0), Handler)


async def test_metrics_exported_over_otlp_to_loopback(instrument: Any, pair: Any, counter: Any) -> None:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    server = _MetricsReceiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/metrics"
    mp = MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint), 60_000)])
    try:
        instrument(meter_provider=mp)
        await _turn(pair, counter, ScriptAgent(SCRIPT, usage=USAGE))
        assert mp.force_flush(10_000)
    finally:
        mp.shutdown()
        server.shutdown()
        server.server_close()
    received = {}
    for request in server.requests:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    received[metric.name] = metric
    assert {
        "acp.client.operation.duration",
        "acp.server.operation.duration",
        "gen_ai.invoke_agent.duration",
        "gen_ai.execute_tool.duration",
        "acp.turn.time_to_first_chunk",
        "acp.turn.usage.input_tokens",
        "acp.turn.usage.output_tokens",
    } <= set(received)
    assert received["gen_ai.invoke_agent.duration"].unit == "s"


@PER_HISTOGRAM_BUCKETS
def test_each_histogram_exports_its_buckets() -> None:
    """The bucket advisory of each histogram reaches the OTLP export (a user's provider, no View)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    server = _MetricsReceiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/metrics"
    mp = MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint), 60_000)])
    try:
        instruments = acp_metrics.make_instruments(mp, "0")
        assert instruments is not None
        for histogram in HISTOGRAMS:
            getattr(instruments, histogram).record(1.5)
        assert mp.force_flush(10_000)
    finally:
        mp.shutdown()
        server.shutdown()
        server.server_close()
    bounds = {
        metric.name: tuple(metric.histogram.data_points[0].explicit_bounds)
        for request in server.requests
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    assert bounds == acp_metrics.HISTOGRAM_BUCKETS


async def test_a_failed_turn_is_recorded_with_its_error_type(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, pair: Any, counter: Any
) -> None:
    """A turn whose prompt the agent fails: its duration is recorded with the error's type, not a stop reason."""
    instrument(meter_provider=meter_provider)
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    with pytest.raises(Exception):  # noqa: B017 - the app sees a RequestError
        await prompt(p.client_conn, session_id, "fail now")
    await wait_spans_closed(counter)
    points = _points(reader)
    turns = points.get("gen_ai.invoke_agent.duration", []) + points.get("gen_ai.client.operation.duration", [])
    assert turns
    for turn in turns:
        assert turn.attributes["error.type"] in ("ValueError", "-32603"), dict(turn.attributes)
        assert "acp.stop_reason" not in turn.attributes
