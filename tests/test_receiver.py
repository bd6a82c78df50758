"""Real OTLP/HTTP exports (protobuf, gzip, from a subprocess) into the demo's receiver, and OTLP JSON files."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, format_span_id, format_trace_id

from acp_otel._demo.otlp_json import filter_resource_spans, parse_otlp_json, read_otlp_json, write_otlp_json
from acp_otel._demo.receiver import MAX_BODY_BYTES, OtlpReceiver, ReceivedSpan

TIMEOUT = 15.0
PROTOBUF = {"Content-Type": "application/x-protobuf"}
# The attributes of the client session/prompt span _emit_turn creates (and _assert_turn expects back).
CLIENT_ATTRIBUTES = {
    "rpc.system.name": "jsonrpc",
    "rpc.method": "session/prompt",
    "gen_ai.conversation.id": "sess-1",
    "acp.prompt.blocks": 2,
    "acp.ratio": 0.5,
    "acp.streaming": True,
    "acp.tags": ["a", "b"],
}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def _provider(exporter: SpanExporter, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service, "deployment.environment": "test"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _emit_turn(provider: TracerProvider) -> dict[str, str]:
    """Create a small ACP-like trace; return the hex ids the SDK assigned."""
    tracer = provider.get_tracer("acp-otel-test", "0.1")
    with tracer.start_as_current_span("warmup", kind=SpanKind.INTERNAL) as warm:
        pass
    with tracer.start_as_current_span(
        "session/prompt",
        kind=SpanKind.CLIENT,
        attributes=CLIENT_ATTRIBUTES,
        links=[Link(warm.get_span_context(), {"link.reason": "warmup"})],
    ) as client:
        client.add_event("acp.update", {"acp.update.kind": "agent_message_chunk", "acp.seq": 1})
        with tracer.start_as_current_span("session/prompt", kind=SpanKind.SERVER) as server:
            with tracer.start_as_current_span("session/update", kind=SpanKind.PRODUCER):
                pass
            with tracer.start_as_current_span("fs/read_text_file", kind=SpanKind.CONSUMER) as failing:
                failing.set_status(Status(StatusCode.ERROR, "file not found"))
    assert provider.force_flush(int(TIMEOUT * 1000))
    return {
        "trace": format_trace_id(client.get_span_context().trace_id),
        "warm": format_span_id(warm.get_span_context().span_id),
        "warm_trace": format_trace_id(warm.get_span_context().trace_id),
        "client": format_span_id(client.get_span_context().span_id),
        "server": format_span_id(server.get_span_context().span_id),
        "failing": format_span_id(failing.get_span_context().span_id),
    }


def _export_turn(exporter: SpanExporter, service: str) -> dict[str, str]:
    """Export one turn through ``exporter`` as ``service`` (provider shut down afterwards); return its ids."""
    provider = _provider(exporter, service)
    try:
        return _emit_turn(provider)
    finally:
        provider.shutdown()


def _wait_for_count(receiver: OtlpReceiver, count: int) -> list[ReceivedSpan]:
    return receiver.wait_for(lambda spans: len(spans) >= count, timeout=TIMEOUT)


def _by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.span_id: s for s in spans}


def _assert_turn(spans: list[ReceivedSpan], ids: dict[str, str], service: str) -> None:
    by_id = _by_id(spans)
    client, server, failing = by_id[ids["client"]], by_id[ids["server"]], by_id[ids["failing"]]

    assert client.trace_id == server.trace_id == failing.trace_id == ids["trace"]
    assert len(client.trace_id) == 32 and client.trace_id == client.trace_id.lower()
    assert client.parent_span_id == ""
    assert server.parent_span_id == ids["client"]
    assert failing.parent_span_id == ids["server"]
    producer = next(s for s in spans if s.name == "session/update")
    assert producer.parent_span_id == ids["server"]

    assert (client.kind, server.kind, producer.kind, failing.kind) == ("CLIENT", "SERVER", "PRODUCER", "CONSUMER")
    assert by_id[ids["warm"]].kind == "INTERNAL"

    assert client.attributes == CLIENT_ATTRIBUTES
    assert [(e.name, e.attributes) for e in client.events] == [
        ("acp.update", {"acp.update.kind": "agent_message_chunk", "acp.seq": 1})
    ]
    assert client.start_time_unix_nano <= client.events[0].time_unix_nano <= client.end_time_unix_nano
    assert [(ln.trace_id, ln.span_id, ln.attributes) for ln in client.links] == [
        (ids["warm_trace"], ids["warm"], {"link.reason": "warmup"})
    ]

    assert failing.status_code == "ERROR" and failing.status_message == "file not found" and failing.is_error
    assert client.status_code == "UNSET" and client.status_message == ""

    assert {s.service_name for s in spans} == {service}
    assert client.resource_attributes["deployment.environment"] == "test"
    assert client.scope_name == "acp-otel-test" and client.scope_version == "0.1"
    assert 0 < client.start_time_unix_nano <= server.start_time_unix_nano <= server.end_time_unix_nano
    assert server.end_time_unix_nano <= client.end_time_unix_nano


def test_http_protobuf_export(receiver: OtlpReceiver) -> None:
    assert receiver.http_endpoint.startswith("http://127.0.0.1:")
    ids = _export_turn(HttpSpanExporter(endpoint=receiver.http_traces_url), "acp-test-http")
    spans = _wait_for_count(receiver, 5)
    _assert_turn(spans, ids, "acp-test-http")
    assert receiver.export_count >= 1


def test_http_gzip_export(receiver: OtlpReceiver) -> None:
    exporter = HttpSpanExporter(endpoint=receiver.http_traces_url, compression=Compression.Gzip)
    ids = _export_turn(exporter, "acp-test-gzip")
    _assert_turn(_wait_for_count(receiver, 5), ids, "acp-test-gzip")


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read()


JSON_TRACE_ID = "5b8efff798038103d269b633813fc60c"
JSON_BODY = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-client"}}]},
            "scopeSpans": [
                {
                    "scope": {"name": "hand-written"},
                    "spans": [
                        {
                            "traceId": JSON_TRACE_ID,
                            "spanId": "eee19b7ec3c1b174",
                            "parentSpanId": "eee19b7ec3c1b173",
                            "name": "session/new",
                            "kind": 3,
                            "startTimeUnixNano": "1544712660000000000",
                            "endTimeUnixNano": "1544712661000000000",
                            "attributes": [
                                {"key": "n", "value": {"intValue": "42"}},
                                {"key": "list", "value": {"arrayValue": {"values": [{"stringValue": "x"}]}}},
                            ],
                            "status": {"code": 2, "message": "nope"},
                        }
                    ],
                }
            ],
        }
    ]
}


def test_http_rejects_bad_requests(receiver: OtlpReceiver) -> None:
    status, _, _ = _post(receiver.http_endpoint + "/v1/metrics", b"", {"Content-Type": "application/x-protobuf"})
    assert status == 404
    status, _, _ = _post(receiver.http_traces_url, b"\xff\xff\xff", {"Content-Type": "application/x-protobuf"})
    assert status == 400
    status, _, _ = _post(
        receiver.http_traces_url, b"not gzip", {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    )
    assert status == 400
    # An empty but valid request is accepted and stores nothing.
    empty = ExportTraceServiceRequest().SerializeToString()
    status, content_type, _ = _post(receiver.http_traces_url, empty, {"Content-Type": "application/x-protobuf"})
    assert (status, content_type) == (200, "application/x-protobuf")
    assert receiver.spans() == []
    # A body over the cap is refused before it is read.
    host, port = receiver.http_endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    try:
        conn.putrequest("POST", "/v1/traces")
        conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        conn.endheaders()
        assert conn.getresponse().status == 413
    finally:
        conn.close()


def test_stop_is_idempotent_and_endpoints_go_away() -> None:
    r = OtlpReceiver().start()
    port = int(r.http_endpoint.rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # listening while running
    r.stop()
    r.stop()
    with pytest.raises(RuntimeError):
        _ = r.http_endpoint
    # Nothing listens any more: the connection itself is refused (an HTTP error reply would not do).
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_wait_for_times_out_and_wakes_up(receiver: OtlpReceiver) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        receiver.wait_for(lambda spans: len(spans) >= 1, timeout=0.3)
    assert time.monotonic() - started < 5

    # A waiter blocked before the export arrives is woken up when it does; the hand-written request decodes
    # field by field.
    body = parse_otlp_json(json.dumps(JSON_BODY)).SerializeToString()
    timer = threading.Timer(0.2, _post, args=(receiver.http_traces_url, body, PROTOBUF))
    timer.start()
    try:
        spans = _wait_for_count(receiver, 1)
    finally:
        timer.join()
    span = spans[0]
    assert (span.trace_id, span.span_id, span.parent_span_id) == (JSON_TRACE_ID, "eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert (span.name, span.kind, span.service_name, span.scope_name) == (
        "session/new",
        "CLIENT",
        "json-client",
        "hand-written",
    )
    assert span.attributes == {"n": 42, "list": ["x"]}
    assert (span.status_code, span.status_message, span.is_error) == ("ERROR", "nope", True)
    assert span.duration_ns == 1_000_000_000
    assert receiver.export_count == 1


CHILD_SCRIPT = textwrap.dedent(
    """
    import os
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # No endpoint argument: the exporter must find the receiver through the environment alone.
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("child")
    with tracer.start_as_current_span("child-root", kind=trace.SpanKind.CLIENT) as root:
        with tracer.start_as_current_span("child-leaf", attributes={"pid": os.getpid()}):
            pass
    provider.shutdown()
    print(format(root.get_span_context().trace_id, "032x"))
    """
)


def test_subprocess_exports_via_environment(receiver: OtlpReceiver) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(receiver.exporter_env())
    env["OTEL_SERVICE_NAME"] = "acp-subprocess"
    result = subprocess.run(
        [sys.executable, "-c", CHILD_SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    trace_id = result.stdout.strip()
    spans = receiver.wait_for(lambda spans: len([s for s in spans if s.trace_id == trace_id]) >= 2, TIMEOUT)
    by_name = {s.name: s for s in spans}
    assert by_name["child-leaf"].parent_span_id == by_name["child-root"].span_id
    assert by_name["child-root"].kind == "CLIENT"
    assert by_name["child-leaf"].attributes["pid"] > 0
    assert {s.service_name for s in spans} == {"acp-subprocess"}


# --------------------------------------------------------------------------- OTLP JSON files


def test_otlp_json_file_round_trip(receiver: OtlpReceiver, tmp_path: Path) -> None:
    ids = _export_turn(HttpSpanExporter(endpoint=receiver.http_traces_url), "acp-test-json")
    _wait_for_count(receiver, 5)

    path = tmp_path / "trace.jsonl"
    written = write_otlp_json(receiver.resource_spans(), path, trace_id=ids["trace"])
    assert written == 4

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert list(doc) == ["resourceSpans"]
    spans_json = [sp for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    assert {sp["traceId"] for sp in spans_json} == {ids["trace"]}  # hex, not base64
    client_json = next(sp for sp in spans_json if sp["spanId"] == ids["client"])
    assert client_json["kind"] == 3  # enums as integers (SPAN_KIND_CLIENT)
    assert isinstance(client_json["startTimeUnixNano"], str)  # int64 as string
    assert client_json["links"][0]["spanId"] == ids["warm"]
    attrs = {a["key"]: a["value"] for a in client_json["attributes"]}
    assert attrs["acp.prompt.blocks"] == {"intValue": "2"}
    assert attrs["acp.tags"] == {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}}
    server_json = next(sp for sp in spans_json if sp["spanId"] == ids["server"])
    assert server_json["parentSpanId"] == ids["client"]
    failing_json = next(sp for sp in spans_json if sp["spanId"] == ids["failing"])
    assert failing_json["status"] == {"code": 2, "message": "file not found"}

    # Reading the file back gives exactly the spans the receiver decoded for that trace.
    expected = sorted(receiver.spans(trace_id=ids["trace"]), key=lambda s: s.span_id)
    assert sorted(read_otlp_json(path), key=lambda s: s.span_id) == expected
    assert read_otlp_json(path, trace_id=ids["warm_trace"]) == []

    # Without a filter both traces are written.
    all_path = tmp_path / "all.jsonl"
    assert write_otlp_json(receiver.resource_spans(), all_path) == 5
    assert sorted(s.span_id for s in read_otlp_json(all_path)) == sorted(s.span_id for s in receiver.spans())

    # Filtering never changes its input, and what resource_spans() hands out is the caller's to change.
    mine = receiver.resource_spans()
    before = [rs.SerializeToString() for rs in mine]
    assert sum(len(ss.spans) for rs in filter_resource_spans(mine, ids["warm_trace"]) for ss in rs.scope_spans) == 1
    assert [rs.SerializeToString() for rs in mine] == before
    for rs in mine:
        del rs.scope_spans[:]
    assert write_otlp_json(receiver.resource_spans(), all_path) == 5


def test_read_otlp_json_accepts_collector_style_lines(tmp_path: Path) -> None:
    path = tmp_path / "collector.jsonl"
    path.write_text(json.dumps(JSON_BODY) + "\n\n" + json.dumps(JSON_BODY) + "\n", encoding="utf-8")
    spans = read_otlp_json(path)
    assert len(spans) == 2
    assert spans[0].trace_id == JSON_TRACE_ID and spans[0].attributes["n"] == 42
    assert parse_otlp_json(json.dumps(JSON_BODY)).resource_spans[0].scope_spans[0].spans[0].name == "session/new"
