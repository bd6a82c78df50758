"""Real OTLP exports (HTTP, gzip, JSON, gRPC, from a subprocess) into the embedded receiver."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, format_span_id, format_trace_id

from acp_otel.demo.otlp_json import filter_resource_spans, parse_otlp_json, read_otlp_json, write_otlp_json
from acp_otel.demo.receiver import MAX_BODY_BYTES, OtlpReceiver, ReceivedSpan

TIMEOUT = 15.0
PROTOBUF = {"Content-Type": "application/x-protobuf"}
# The attributes of the client session/prompt span _emit_turn creates (and _assert_turn expects back).
CLIENT_ATTRIBUTES = {
    "rpc.system.name": "jsonrpc",
    "rpc.method": "session/prompt",
    "acp.session.id": "sess-1",
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
    spans = receiver.wait_for_spans(count=5, timeout=TIMEOUT)
    _assert_turn(spans, ids, "acp-test-http")
    assert receiver.export_counts["http"] >= 1 and receiver.export_counts["grpc"] == 0


def test_http_gzip_export(receiver: OtlpReceiver) -> None:
    exporter = HttpSpanExporter(endpoint=receiver.http_traces_url, compression=Compression.Gzip)
    ids = _export_turn(exporter, "acp-test-gzip")
    _assert_turn(receiver.wait_for_spans(count=5, timeout=TIMEOUT), ids, "acp-test-gzip")


def test_grpc_export(receiver: OtlpReceiver) -> None:
    assert receiver.grpc_endpoint.startswith("http://127.0.0.1:")
    assert receiver.grpc_endpoint != receiver.http_endpoint
    ids = _export_turn(GrpcSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True), "acp-test-grpc")
    spans = receiver.wait_for_spans(count=5, timeout=TIMEOUT)
    _assert_turn(spans, ids, "acp-test-grpc")
    assert receiver.export_counts["grpc"] >= 1 and receiver.export_counts["http"] == 0


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


def test_http_json_gzip_protobuf_and_deflate_bodies_decode_alike(receiver: OtlpReceiver) -> None:
    body = json.dumps(JSON_BODY).encode()
    status, content_type, payload = _post(receiver.http_traces_url, body, {"Content-Type": "application/json"})
    assert (status, content_type, json.loads(payload)) == (200, "application/json", {})
    status, _, _ = _post(
        receiver.http_traces_url,
        gzip.compress(body),
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert status == 200
    # The same request as protobuf, plain and deflate-compressed.
    protobuf = parse_otlp_json(body).SerializeToString()
    status, content_type, _ = _post(receiver.http_traces_url, protobuf, PROTOBUF)
    assert (status, content_type) == (200, "application/x-protobuf")
    status, _, _ = _post(receiver.http_traces_url, zlib.compress(protobuf), {**PROTOBUF, "Content-Encoding": "deflate"})
    assert status == 200
    spans = receiver.wait_for_spans(count=4, timeout=TIMEOUT)
    assert len(spans) == 4
    span = spans[0]
    assert span.trace_id == JSON_TRACE_ID
    assert (span.span_id, span.parent_span_id) == ("eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert (span.name, span.kind, span.service_name, span.scope_name) == (
        "session/new",
        "CLIENT",
        "json-client",
        "hand-written",
    )
    assert span.attributes == {"n": 42, "list": ["x"]}
    assert (span.status_code, span.status_message) == ("ERROR", "nope")
    assert span.duration_ns == 1_000_000_000
    # JSON, gzip JSON, protobuf and deflate protobuf all decode to exactly the same span.
    assert spans[1] == span and spans[2] == span and spans[3] == span
    assert receiver.export_counts["http"] == 4


def test_http_rejects_bad_requests(receiver: OtlpReceiver) -> None:
    status, _, _ = _post(receiver.http_endpoint + "/v1/metrics", b"", {"Content-Type": "application/x-protobuf"})
    assert status == 404
    status, _, _ = _post(receiver.http_traces_url, b"\xff\xff\xff", {"Content-Type": "application/x-protobuf"})
    assert status == 400
    status, _, _ = _post(receiver.http_traces_url, b"x", {"Content-Type": "text/plain"})
    assert status == 415
    status, _, _ = _post(
        receiver.http_traces_url, b"not gzip", {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    )
    assert status == 400
    # An empty but valid request is accepted and stores nothing.
    empty = ExportTraceServiceRequest().SerializeToString()
    status, content_type, _ = _post(receiver.http_traces_url, empty, {"Content-Type": "application/x-protobuf"})
    assert (status, content_type) == (200, "application/x-protobuf")
    assert receiver.spans() == []


# --------------------------------------------------------------------------- HTTP connection handling


def _port(receiver: OtlpReceiver) -> int:
    return int(receiver.http_endpoint.rsplit(":", 1)[1])


def _one_span_request(name: str) -> bytes:
    """A protobuf ExportTraceServiceRequest holding one span called ``name``."""
    doc = json.loads(json.dumps(JSON_BODY))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = name
    return parse_otlp_json(doc).SerializeToString()


def _send_unread_404(conn: http.client.HTTPConnection, body: bytes) -> None:
    conn.request("POST", "/v1/metrics", body=body, headers=PROTOBUF)


def _send_without_length(conn: http.client.HTTPConnection, body: bytes) -> None:
    conn.putrequest("POST", "/v1/traces")
    conn.putheader("Content-Type", "application/x-protobuf")
    conn.endheaders()
    conn.send(body)


def _send_too_large(conn: http.client.HTTPConnection, body: bytes) -> None:
    conn.putrequest("POST", "/v1/traces")
    conn.putheader("Content-Type", "application/x-protobuf")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()
    conn.send(body)  # the start of the announced body; the receiver refuses before reading it


def _send_bad_chunk(conn: http.client.HTTPConnection, body: bytes) -> None:
    conn.putrequest("POST", "/v1/traces")
    conn.putheader("Content-Type", "application/x-protobuf")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    conn.send(b"zz\r\n" + body + b"\r\n0\r\n\r\n")


@pytest.mark.parametrize(
    ("send", "status"),
    [(_send_unread_404, 404), (_send_without_length, 411), (_send_too_large, 413), (_send_bad_chunk, 400)],
    ids=["404-wrong-path", "411-no-length", "413-too-large", "400-bad-chunk"],
)
def test_early_error_reply_closes_the_connection(
    receiver: OtlpReceiver, send: Callable[[http.client.HTTPConnection, bytes], None], status: int
) -> None:
    # The refused request carries a real OTLP body: left unread on a kept-alive connection, it would be
    # parsed as the next request line.
    refused, accepted = _one_span_request("refused"), _one_span_request("accepted")
    conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=TIMEOUT)
    try:
        send(conn, refused)
        response = conn.getresponse()
        response.read()
        assert response.status == status
        assert response.getheader("Connection") == "close"
        # The same HTTPConnection object (it reconnects, as HTTP clients do after "Connection: close").
        conn.request("POST", "/v1/traces", body=accepted, headers=PROTOBUF)
        response = conn.getresponse()
        response.read()
        assert response.status == 200
    finally:
        conn.close()
    assert [s.name for s in receiver.wait_for_spans(count=1, timeout=TIMEOUT)] == ["accepted"]
    assert [s.name for s in receiver.spans()] == ["accepted"]


def test_chunked_bodies_and_keep_alive(receiver: OtlpReceiver) -> None:
    first, second = _one_span_request("first"), _one_span_request("second")
    conn = http.client.HTTPConnection("127.0.0.1", _port(receiver), timeout=TIMEOUT)
    try:
        # Chunked (no Content-Length), in uneven pieces, and deflate-compressed in chunks.
        pieces = [first[:5], first[5:7], first[7:]]
        conn.request("POST", "/v1/traces", body=iter(pieces), headers=PROTOBUF, encode_chunked=True)
        response = conn.getresponse()
        response.read()
        assert response.status == 200 and response.getheader("Connection") != "close"
        sock = conn.sock
        packed = zlib.compress(second)
        conn.request(
            "POST",
            "/v1/traces",
            body=iter([packed[:3], packed[3:]]),
            headers={**PROTOBUF, "Content-Encoding": "deflate"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        assert conn.sock is sock  # both requests went over one kept-alive connection
    finally:
        conn.close()
    assert [s.name for s in receiver.wait_for_spans(count=2, timeout=TIMEOUT)] == ["first", "second"]


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
def test_client_gone_mid_body_is_silent(capfd: pytest.CaptureFixture[str], reset: bool) -> None:
    complete = _one_span_request("truncated")
    with OtlpReceiver(enable_grpc=False) as r:
        sock = socket.create_connection(("127.0.0.1", _port(r)), timeout=TIMEOUT)
        # The whole (valid) message, but announced as longer: the receiver must not decode the part it got.
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            + f"Content-Length: {len(complete) + 100}\r\n\r\n".encode()
            + complete
        )
        time.sleep(0.2)  # let the receiver start reading the body
        if reset:  # an RST instead of a FIN: the receiver's read fails with ConnectionResetError
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        # The receiver keeps serving.
        status, _, _ = _post(r.http_traces_url, _one_span_request("after"), PROTOBUF)
        assert status == 200
        assert [s.name for s in r.wait_for_spans(count=1, timeout=TIMEOUT)] == ["after"]
    # stop() has waited for the connection threads, so anything they printed is captured by now.
    assert [s.name for s in r.spans()] == ["after"]
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def _connection_threads(port: int) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.is_alive() and t.name == f"otlp-http-receiver-{port}-conn"]


def test_stop_ends_open_connections() -> None:
    r = OtlpReceiver(enable_grpc=False).start()
    port = _port(r)
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    stalled = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        # A kept-alive connection waiting for its next request, and one stuck in the middle of its headers.
        idle.request("POST", "/v1/traces", body=_one_span_request("one"), headers=PROTOBUF)
        response = idle.getresponse()
        response.read()
        assert response.status == 200
        stalled.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        deadline = time.monotonic() + TIMEOUT
        while len(_connection_threads(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_connection_threads(port)) == 2

        started = time.monotonic()
        r.stop()
        assert time.monotonic() - started < 3  # the threads were ended, not waited out
        deadline = time.monotonic() + 2
        while _connection_threads(port) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _connection_threads(port) == []
    finally:
        idle.close()
        stalled.close()
        r.stop()


def test_single_protocol_modes() -> None:
    with OtlpReceiver(enable_grpc=False) as http_only:
        assert http_only.http_endpoint.startswith("http://127.0.0.1:")
        with pytest.raises(RuntimeError):
            _ = http_only.grpc_endpoint
    with OtlpReceiver(enable_http=False) as grpc_only:
        assert grpc_only.grpc_endpoint.startswith("http://127.0.0.1:")
        with pytest.raises(RuntimeError):
            _ = grpc_only.http_endpoint
    with pytest.raises(ValueError):
        OtlpReceiver(enable_http=False, enable_grpc=False)


def test_stop_is_idempotent_and_endpoints_go_away() -> None:
    r = OtlpReceiver(enable_grpc=False).start()
    port = _port(r)
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
        receiver.wait_for_spans(count=1, timeout=0.3)
    assert time.monotonic() - started < 5

    # A waiter blocked before the export arrives is woken up when it does.
    body = json.dumps(JSON_BODY).encode()
    timer = threading.Timer(0.2, _post, args=(receiver.http_traces_url, body, {"Content-Type": "application/json"}))
    timer.start()
    try:
        spans = receiver.wait_for_spans(count=1, name="session/new", timeout=TIMEOUT)
    finally:
        timer.join()
    assert [s.name for s in spans] == ["session/new"]
    assert receiver.wait_for(lambda ss: any(s.is_error for s in ss), timeout=1)[0].status_message == "nope"


def test_traces_grouping_and_clear(receiver: OtlpReceiver) -> None:
    ids = _export_turn(HttpSpanExporter(endpoint=receiver.http_traces_url), "acp-test-group")
    receiver.wait_for_spans(count=5, timeout=TIMEOUT)
    traces = receiver.traces()
    assert set(traces) == {ids["trace"], ids["warm_trace"]}
    turn = traces[ids["trace"]]
    assert len(turn) == 4
    assert turn == sorted(turn, key=lambda s: s.start_time_unix_nano)
    assert [s.span_id for s in receiver.spans(trace_id=ids["warm_trace"].upper())] == [ids["warm"]]
    receiver.clear()
    assert receiver.spans() == [] and receiver.traces() == {} and receiver.resource_spans() == []


CHILD_SCRIPT = textwrap.dedent(
    """
    import os
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
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


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_subprocess_exports_via_environment(receiver: OtlpReceiver, protocol: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(receiver.exporter_env(protocol))
    env["OTEL_SERVICE_NAME"] = "acp-subprocess"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
        receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    )
    result = subprocess.run(
        [sys.executable, "-c", CHILD_SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    trace_id = result.stdout.strip()
    spans = receiver.wait_for_spans(count=2, trace_id=trace_id, timeout=TIMEOUT)
    by_name = {s.name: s for s in spans}
    assert by_name["child-leaf"].parent_span_id == by_name["child-root"].span_id
    assert by_name["child-root"].kind == "CLIENT"
    assert by_name["child-leaf"].attributes["pid"] > 0
    assert {s.service_name for s in spans} == {"acp-subprocess"}
    transport = "grpc" if protocol == "grpc" else "http"
    assert receiver.export_counts[transport] >= 1


# --------------------------------------------------------------------------- OTLP JSON files


def test_otlp_json_file_round_trip(receiver: OtlpReceiver, tmp_path: Path) -> None:
    ids = _export_turn(HttpSpanExporter(endpoint=receiver.http_traces_url), "acp-test-json")
    receiver.wait_for_spans(count=5, timeout=TIMEOUT)

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
