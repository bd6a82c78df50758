"""The pure parts of ``--agent-telemetry``, in process and fast (what ``nox -s mutation`` runs against their
mutants): the content scrubber (``_proxy/agent_content``), the OTLP/HTTP codec (``_proxy/otlp_codec``), the
forwarder (``_proxy/forwarder``, against a loopback backend and a stalled one), the agents' switches
(``_agent_switches``) and the environment the proxy gives its agent (``_child_env``). The end-to-end tests of the
same promises are ``test_agent_privacy_promises.py``, ``test_agent_joining_promises.py`` and
``test_forwarder_stall.py``."""

from __future__ import annotations

import base64
import gzip
import json
import socket
import time
import zlib
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from otlp_backend import Backend
from test_agent_privacy_promises import AGENT_KEYS, CONTENT_EVENTS, CONTENT_SWITCHES, CONVENTION_KEYS, EVENT_NAME_FIELD

from acp_otel import _agent_switches as sw
from acp_otel import _child_env as ce
from acp_otel._proxy import forwarder as fw
from acp_otel._proxy import otlp_codec as codec
from acp_otel._proxy.agent_content import scrub_logs, scrub_spans

# ---------------------------------------------------------------------- the scrubber


def _trace_request(keys: tuple[str, ...]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(2):  # two resources, two scopes each: every one is scrubbed
        resource = request.resource_spans.add()
        for _ in range(2):
            span = resource.scope_spans.add().spans.add(name="chat")
            span.attributes.add(key="gen_ai.request.model").value.string_value = "kept"
            for key in keys:
                span.attributes.add(key=key).value.string_value = "CANARY"
            event = span.events.add(name="e")
            for key in keys:
                event.attributes.add(key=key).value.string_value = "CANARY"
            event.attributes.add(key="kept").value.int_value = 1
    return request


@pytest.mark.parametrize("profile", list(AGENT_KEYS))
def test_every_content_attribute_of_spans_and_their_events_is_removed(profile: str) -> None:
    keys = (*CONVENTION_KEYS, *AGENT_KEYS[profile])
    request = _trace_request(keys)
    assert scrub_spans(request, False, None if profile == "none" else profile) == 4 * 2 * len(keys)
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            (span,) = scope.spans
            assert [kv.key for kv in span.attributes] == ["gen_ai.request.model"]
            assert [kv.key for kv in span.events[0].attributes] == ["kept"]
    untouched = _trace_request(keys)
    assert scrub_spans(untouched, True, profile) == 0 and untouched == _trace_request(keys)
    # Another profile's own keys are not content for this one (they may be anything there).
    other = _trace_request(("result",))
    assert scrub_spans(other, False, profile) == (1 if profile == "qwen-code" else 0) * 8


def _logs(*records: dict[str, Any]) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    for _ in range(2):
        scope = request.resource_logs.add().scope_logs.add()
        for spec in records:
            record = scope.log_records.add(**({"event_name": spec["event_name"]} if "event_name" in spec else {}))
            if "body" in spec:
                record.body.CopyFrom(spec["body"])
            for key, value in spec.get("attrs", {}).items():
                record.attributes.add(key=key).value.string_value = value
    return request


def _text(value: str) -> AnyValue:
    return AnyValue(string_value=value)


def _array(*values: AnyValue) -> AnyValue:
    return AnyValue(array_value=ArrayValue(values=list(values)))


@pytest.mark.parametrize("profile", list(AGENT_KEYS))
def test_every_content_log_body_and_attribute_is_removed(profile: str) -> None:
    keys = (*CONVENTION_KEYS, *AGENT_KEYS[profile])
    records = [
        {"attrs": {key: "CANARY" for key in keys} | {"kept": "yes"}, "body": _text("a line")},
        *({"attrs": {"event.name": event}, "body": _text("CANARY")} for event in CONTENT_EVENTS),
        *({"event_name": event, "body": _text("CANARY")} for event in CONTENT_EVENTS if EVENT_NAME_FIELD),
        {"event_name": "gen_ai.client.inference.operation.details", "body": _text("not a message event")},
        {"attrs": {"event.name": "gen_ai.user.message"}},  # no body: nothing to remove
    ]
    if not EVENT_NAME_FIELD:
        records[-2].pop("event_name")
    request = _logs(*records)
    removed = scrub_logs(request, False, None if profile == "none" else profile)
    ways = 2 if EVENT_NAME_FIELD else 1  # the attribute, and the field where the proto has it
    assert removed == 2 * (len(keys) + ways * len(CONTENT_EVENTS))
    for resource in request.resource_logs:
        got = resource.scope_logs[0].log_records
        assert [kv.key for kv in got[0].attributes] == ["kept"] and got[0].body == _text("a line")
        assert all(not r.HasField("body") for r in got[1 : 1 + ways * len(CONTENT_EVENTS)])
        assert got[-2].body == _text("not a message event") and not got[-1].HasField("body")
    untouched = _logs(*records)
    assert scrub_logs(untouched, True, profile) == 0 and untouched == _logs(*records)


def _wire_record(*fields: bytes) -> LogRecord:
    """A record parsed from ``fields`` appended to a record with a body: whatever proto is installed (field 12,
    the event name, is unknown to opentelemetry-proto before 1.35)."""
    base = LogRecord(body=_text("CANARY"), severity_number=9, time_unix_nano=1).SerializeToString()
    return LogRecord.FromString(base + b"".join(fields))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def _string_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def test_a_message_events_name_on_the_wire_removes_its_body_whatever_the_proto_knows() -> None:
    from acp_otel._proxy import agent_content

    for name, removed in ((b"gen_ai.user.message", 1), (b"gen_ai.client.inference.operation.details", 0)):
        request = ExportLogsServiceRequest()
        record = _wire_record(_string_field(12, name))
        request.resource_logs.add().scope_logs.add().log_records.append(record)
        assert scrub_logs(request, False, None) == removed, name
        assert request.resource_logs[0].scope_logs[0].log_records[0].HasField("body") == (not removed)
    # The reader itself, on the wire as an agent sends it (older protos only read the name this way): fields of
    # every wire type before the name, varints of several bytes (a byte of 0x80 among them), field numbers past 15.
    read = agent_content._wire_event_name
    fixed64, fixed32 = bytes([15 << 3 | 1]) + b"\x80" * 8, bytes([14 << 3 | 5]) + b"\x80" * 4
    numbers = _varint(13 << 3) + _varint(2**40 + 300) + _varint(13 << 3) + _varint(2**14)
    long_name = b"gen_ai." + b"n" * 300
    before = (fixed64, fixed32, numbers, _string_field(20_000, b"x" * 2**14))
    for order in (before, before[::-1]):
        assert read(b"".join(order) + _string_field(12, long_name)) == long_name.decode()
        assert read(b"".join(order)) == ""
    assert read(_string_field(12, b"e.v") + _string_field(12, b"later")) == "e.v"
    for value in (0, 1, 127, 128, 300, 2**14, 2**14 + 1, 2**40 + 300):  # a byte of 0x80 resynchronizes a walk
        assert agent_content._varint(b"\x00" + _varint(value) + b"\x05", 1) == (value, 1 + len(_varint(value)))
    assert read(b"") == ""
    # An unknown group (no OTLP encoding has one) and a record cut short count as unreadable: the body goes.
    group = bytes([13 << 3 | 3, 13 << 3 | 4])
    assert read(group + _string_field(12, b"e.v")) == agent_content._UNREADABLE
    assert read(fixed64[:5]) == agent_content._UNREADABLE
    assert read(_string_field(12, b"e.v")[:-1] + b"\xff") == "e.v"[:-1] + "\ufffd"
    unreadable = _wire_record(group)
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.append(unreadable)
    assert scrub_logs(request, False, None) == (0 if agent_content._PROTO_HAS_EVENT_NAME else 1)


def test_opencodes_log_lines_keep_their_message_only() -> None:
    bodies = [
        (_array(_text("evaluated"), _text("{pattern: 'cat CANARY'}")), _text("evaluated"), 1),
        (_array(AnyValue(int_value=3), _text("evaluated"), _text("CANARY")), _text("evaluated"), 1),
        (_array(AnyValue(int_value=3)), None, 1),  # no message at all: emptied
        (_array(_text("just a message")), _array(_text("just a message")), 0),
        (_text("a message alone"), _text("a message alone"), 0),
        (AnyValue(kvlist_value={"values": [{"key": "k", "value": {"string_value": "CANARY"}}]}), None, 1),
        (AnyValue(), AnyValue(), 0),  # a body with no value
    ]
    for body, expected, removed in bodies:
        request = _logs({"body": body})
        assert scrub_logs(request, False, "opencode") == 2 * removed, body
        record = request.resource_logs[0].scope_logs[0].log_records[0]
        assert (record.body if record.HasField("body") else None) == expected, body
        assert scrub_logs(_logs({"body": body}), False, "gemini-cli") == 0  # not another agent's rule


# ---------------------------------------------------------------------- the codec


def test_paths_and_content_types() -> None:
    assert [codec.signal_of(p) for p in ("/v1/traces", "/v1/logs/", "/x/v1/metrics?a=1", "/v1/trace", "/")] == [
        "traces",
        "logs",
        "metrics",
        None,
        None,
    ]
    assert codec.signal_of("/v1/traces?a=1?b=2") == "traces" and codec.signal_of("/v1/tracesX") is None
    assert codec.is_json("application/json; charset=utf-8") and codec.is_json(" Application/JSON ")
    assert codec.is_json("application/json; charset=utf-8; q=1")
    assert not codec.is_json("application/x-protobuf") and not codec.is_json(None) and not codec.is_json("")


def test_bodies_are_decompressed_as_their_encoding_says() -> None:
    raw = b"x" * 1000
    assert codec.decompress(raw, None) == raw and codec.decompress(raw, " Identity ") == raw
    assert codec.decompress(gzip.compress(raw), "gzip") == raw
    assert codec.decompress(gzip.compress(raw), "X-GZIP") == raw
    assert codec.decompress(zlib.compress(raw), "deflate") == raw
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert codec.decompress(raw_deflate.compress(raw) + raw_deflate.flush(), "deflate") == raw
    with pytest.raises(codec.BadRequest, match="unsupported Content-Encoding 'br'") as refused:
        codec.decompress(raw, "br")
    assert not refused.value.too_large
    with pytest.raises(codec.BadRequest, match="not valid gzip"):
        codec.decompress(zlib.compress(raw), "gzip")
    bomb = gzip.compress(b"\0" * (codec.MAX_BODY_BYTES + 1))
    with pytest.raises(codec.BadRequest, match=r"^body too large once decompressed$") as refused:
        codec.decompress(bomb, "gzip")
    assert refused.value.too_large
    assert len(codec.decompress(gzip.compress(b"\0" * codec.MAX_BODY_BYTES), "gzip")) == codec.MAX_BODY_BYTES


def test_a_compression_bomb_is_refused_without_inflating_it() -> None:
    import tracemalloc

    packer = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    chunk = b"\0" * (1 << 20)
    bomb = b"".join(packer.compress(chunk) for _ in range(128)) + packer.flush()  # 128 MiB of zeros
    tracemalloc.start()
    try:
        with pytest.raises(codec.BadRequest, match="too large"):
            codec.decompress(bomb, "gzip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * codec.MAX_BODY_BYTES + (8 << 20)  # at most the bound inflated, never the whole bomb


def test_otlp_json_hex_ids_names_and_numbers() -> None:
    trace_id, span_id, parent_id = bytes(range(16)), bytes(range(8, 16)), bytes(range(16, 24))
    for style in ("camel", "snake"):
        keys = ("traceId", "spanId", "parentSpanId") if style == "camel" else ("trace_id", "span_id", "parent_span_id")
        span = dict(zip(keys, (trace_id.hex(), span_id.hex(), parent_id.hex()), strict=True))
        span.update(name="chat", kind=3, unknownField=[{"traceId": "zz"}])
        span["attributes"] = [{"key": "hex-looking", "value": {"stringValue": "deadbeef"}}]  # not an id: as it is
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
        (got,) = codec.decode("traces", body, True).resource_spans[0].scope_spans[0].spans  # type: ignore[attr-defined]
        assert (got.trace_id, got.span_id, got.parent_span_id, got.kind) == (trace_id, span_id, parent_id, 3), style
        assert got.attributes[0].value.string_value == "deadbeef"
    # base64 (protobuf's own JSON mapping) is taken as well; ids nested in links too.
    link = {"traceId": trace_id.hex(), "spanId": base64.b64encode(span_id).decode()}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a", "links": [link]}]}]}]}).encode()
    (got,) = codec.decode("traces", body, True).resource_spans[0].scope_spans[0].spans  # type: ignore[attr-defined]
    assert (got.links[0].trace_id, got.links[0].span_id) == (trace_id, span_id)
    logs = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": trace_id.hex()}]}]}]}).encode()
    record = codec.decode("logs", logs, True).resource_logs[0].scope_logs[0].log_records[0]  # type: ignore[attr-defined]
    assert record.trace_id == trace_id


def test_what_cannot_be_decoded_is_refused() -> None:
    for body, json_body, reason in (
        (b"{not json", True, "not JSON"),
        (b'{"resourceSpans": "a string"}', True, "not an OTLP/JSON traces request"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}', True, "OTLP/JSON"),
        (b"[" * 100_000, True, "not JSON"),
        (b"\xff\x00garbage", False, "not an OTLP/protobuf traces request"),
    ):
        with pytest.raises(codec.BadRequest, match=reason) as refused:
            codec.decode("traces", body, json_body)
        assert not refused.value.too_large
    request = ExportMetricsServiceRequest()
    request.resource_metrics.add().scope_metrics.add().metrics.add(name="m")
    assert codec.decode("metrics", request.SerializeToString(), False) == request


def test_answers_are_empty_successes_in_the_requests_encoding() -> None:
    assert codec.response("logs", True) == (b"{}", "application/json")
    assert codec.response("traces", False) == (b"", "application/x-protobuf")


# ---------------------------------------------------------------------- the forwarder


def _spans(count: int) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for n in range(count):
        resource = request.resource_spans.add()
        resource.resource.attributes.add(key="service.name").value.string_value = "agent"
        resource.scope_spans.add().spans.add(name=f"s{n}", trace_id=b"\x01" * 16, span_id=n.to_bytes(8, "big") + b"")
    return request


def test_which_signals_are_forwarded(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    assert fw.forwarded_signals() == ("traces", "metrics", "logs")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console, OTLP")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "console")
    assert fw.forwarded_signals() == ("traces",)
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "otlp,console")
    assert fw.forwarded_signals() == ("traces", "logs")
    monkeypatch.setenv("OTEL_SDK_DISABLED", " TRUE ")
    assert fw.forwarded_signals() == ()


def test_items_are_counted_and_resources_marked() -> None:
    spans = _spans(3)
    spans.resource_spans[0].scope_spans.add().spans.add(name="more")
    assert fw.count_items("traces", spans) == 4
    logs = _logs({"body": _text("a")}, {"body": _text("b")})
    assert fw.count_items("logs", logs) == 4 and fw.count_items("metrics", ExportMetricsServiceRequest()) == 1
    fw.mark_relay("traces", spans, "agent-proxy")
    fw.mark_relay("traces", spans, "other")  # once only
    for resource in spans.resource_spans:
        marks = [kv.value.string_value for kv in resource.resource.attributes if kv.key == fw.RELAY_ATTRIBUTE]
        assert marks == ["agent-proxy"]
    fw.mark_relay("logs", logs, "agent-proxy")
    fw.mark_relay("metrics", ExportMetricsServiceRequest(resource_metrics=[{}]), "agent-proxy")
    assert all(r.resource.attributes[0].key == fw.RELAY_ATTRIBUTE for r in logs.resource_logs)


def _point_at(monkeypatch: pytest.MonkeyPatch, endpoint: str, **extra: str) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("compression", ["", "gzip", "deflate"])
def test_requests_are_forwarded_as_they_came_with_the_backends_settings(
    monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    with Backend() as backend:
        _point_at(
            monkeypatch,
            backend.endpoint,
            OTEL_EXPORTER_OTLP_TRACES_HEADERS="x-key=traces-key",
            OTEL_EXPORTER_OTLP_HEADERS="x-key=general,x-other=1",
            OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=compression,
        )
        if compression == "deflate":  # the test backend reads gzip only: decompress here
            monkeypatch.setattr(zlib, "compress", lambda body: body)
        forwarder = fw.Forwarder()
        for n in (1, 2):
            forwarder.put("traces", _spans(n))
        assert forwarder.close(time.monotonic() + 10)
        assert backend.requests["traces"] == [_spans(1), _spans(2)]
        (_, headers, _), _ = backend.headers
        assert headers["x-key"] == "traces-key" and "x-other" not in headers  # the signal's own wins whole
        assert headers["content-type"] == "application/x-protobuf"
        assert headers.get("content-encoding") == (compression or None)
    assert forwarder.accounts["traces"].sent == 3 and forwarder.problems() == []
    forwarder.put("traces", _spans(5))  # after close: dropped, counted
    assert forwarder.accounts["traces"].dropped == 5


def test_a_failed_export_is_counted_and_said_once_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    _point_at(monkeypatch, dead, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{dead}/traces-here")
    forwarder = fw.Forwarder()
    started = time.monotonic()
    assert forwarder.close(started + 5) and time.monotonic() - started < 1.0  # nothing to send: at once
    forwarder = fw.Forwarder()
    forwarder.put("traces", _spans(1))
    forwarder.put("traces", _spans(2))
    forwarder.put("logs", _logs({"body": _text("a")}))
    assert forwarder.close(time.monotonic() + 10)
    assert forwarder.accounts["traces"].failed == 3 and forwarder.accounts["logs"].failed == 2
    said = forwarder.problems()
    assert said[0].startswith(f"3 of the agent's spans not forwarded to {dead}/traces-here: ")
    assert said[1].startswith(f"2 of the agent's log records not forwarded to {dead}/v1/logs: ")
    assert all("nothing is listening there" in line for line in said)


def test_a_full_queue_drops_at_once_and_the_exit_bound_drops_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as stalled:  # accepts (the backlog), never answers
        _point_at(monkeypatch, f"http://127.0.0.1:{stalled.getsockname()[1]}", OTEL_EXPORTER_OTLP_TIMEOUT="30000")
        forwarder = fw.Forwarder(max_queued=2)
        started = time.monotonic()
        for n in range(1, 6):  # one being sent, two queued, two dropped
            forwarder.put("traces", _spans(n))
            time.sleep(0.2 if n == 1 else 0)
        assert time.monotonic() - started < 2.0
        assert forwarder.accounts["traces"].dropped == 4 + 5
        closing = time.monotonic()
        assert not forwarder.close(closing + 0.3)  # the one being sent is still out
        assert time.monotonic() - closing < 0.8  # the exit bound kept
        assert forwarder.accounts["traces"].dropped == 4 + 5 + 2 + 3
        (said,) = forwarder.problems()
        assert said.endswith("the queue was full or the exit bound came first") and said.startswith("14 of")
        one = fw.Forwarder()
        one.put("traces", _spans(1))
        time.sleep(0.2)  # being sent, nothing queued: not done either
        assert not one.close(time.monotonic() + 0.2)


# ---------------------------------------------------------------------- switches and the agent's environment


def test_agents_are_found_by_any_spelling_of_their_names() -> None:
    assert sw.normalized("@zed-industries/claude-agent-acp") == "claude-agent-acp"
    assert sw.normalized("Kimi Code CLI") == "kimi-code-cli" and sw.normalized("--Gemini__") == "gemini"
    for key, aliases in sw.ALIASES.items():
        for alias in (key, *aliases):
            assert sw.key_of(alias) == key and sw.key_of(alias.upper()) == key
    assert sw.key_of("@google/gemini-cli") == "gemini-cli" and sw.key_of("qwen") == "qwen-code"
    assert [sw.key_of(v) for v in ("", None, 5, "my-agent", "gemini" + "x" * 300)] == [None] * 5
    assert sw.key_of("x/" * 130 + "gemini") is None  # past the first 256 characters: not read
    assert sw.key_of("x" * 251 + "/codex") is None and sw.key_of("x" * 250 + "/codex") == "codex"


RECEIVER = "http://127.0.0.1:4999"
COMMANDS = {
    "claude-code": ["npx", "@zed-industries/claude-agent-acp"],
    "qwen-code": ["node", "/opt/node_modules/@qwen-code/qwen-code/cli.js", "--acp"],
    "gemini-cli": ["gemini", "--experimental-acp"],
    "opencode": ["opencode", "acp"],
    "none": ["/usr/bin/my-agent"],
}


@pytest.mark.parametrize("profile", list(CONTENT_SWITCHES))
@pytest.mark.parametrize("capture", [False, True])
def test_each_agents_switches_and_content_switches(profile: str, capture: bool) -> None:
    env = ce.agent_telemetry_variables(COMMANDS[profile], RECEIVER, capture)
    for name, on, off in CONTENT_SWITCHES[profile]:
        assert env[name] == (on if capture else off), name
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == RECEIVER and env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") == (None if capture else "NO_CONTENT")
    switches = {
        "qwen-code": {"QWEN_TELEMETRY_ENABLED": "true", "QWEN_TELEMETRY_OTLP_ENDPOINT": RECEIVER},
        "gemini-cli": {"GEMINI_TELEMETRY_ENABLED": "true", "GEMINI_TELEMETRY_OTLP_ENDPOINT": RECEIVER},
        "claude-code": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_LOGS_EXPORTER": "otlp"},
        "opencode": {
            "OPENCODE_CONFIG_CONTENT": '{"experimental": {"openTelemetry": true}}',
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        },
    }.get(profile, {})
    assert switches.items() <= env.items()
    key = sw.key_of(profile) or ""
    expected = 3 - capture + len(CONTENT_SWITCHES[profile]) + len(sw.SWITCHES.get(key, ()))
    expected += len(sw.CONFIG_SWITCHES.get(key, ()))
    assert len(env) == expected
    assert ce.agent_telemetry_variables(["fast-agent"], RECEIVER, capture)["OTEL__OTLP_ENDPOINT"] == (
        RECEIVER + "/v1/traces"
    )


def test_opencodes_config_switch_is_merged_into_the_users_own_config() -> None:
    """The user's own ``OPENCODE_CONFIG_CONTENT`` keeps its settings and gets the switch; one that is not a JSON
    object is left alone (the proxy does not guess)."""
    own = {"model": "mine/x", "experimental": {"batch_tool": True, "openTelemetry": False}}
    env = ce.proxy_agent_environment(
        {"OPENCODE_CONFIG_CONTENT": json.dumps(own)}, ["opencode", "acp"], telemetry_endpoint=RECEIVER
    )
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == {
        "model": "mine/x",
        "experimental": {"batch_tool": True, "openTelemetry": True},
    }
    for odd in ("[1]", "{not json", '"x"'):
        env = ce.proxy_agent_environment(
            {"OPENCODE_CONFIG_CONTENT": odd}, ["opencode", "acp"], telemetry_endpoint=RECEIVER
        )
        assert env["OPENCODE_CONFIG_CONTENT"] == odd
    env = ce.proxy_agent_environment({"OPENCODE_CONFIG_CONTENT": json.dumps(own)}, ["opencode", "acp"])
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == own  # without --agent-telemetry: untouched
    assert "OPENCODE_CONFIG_CONTENT" not in ce.proxy_agent_environment({}, ["gemini"], telemetry_endpoint=RECEIVER)


def test_the_proxys_exporter_settings_stay_with_the_proxy() -> None:
    proxy_only = [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "otel_exporter_otlp_traces_headers",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
        "OTEL_PYTHON_EXPORTER_OTLP_GRPC_TRACES_CREDENTIAL_PROVIDER",
    ]
    assert all(ce.is_proxy_only(name) for name in proxy_only)
    crossing = ["OTEL_TRACES_SAMPLER", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_PYTHON_LOG_LEVEL", "HOME", "OTEL_EXPORTER"]
    assert not any(ce.is_proxy_only(name) for name in crossing)
    environ = {name: "sekret" for name in proxy_only} | {name: "kept" for name in crossing}
    for endpoint in (None, RECEIVER):
        env = ce.proxy_agent_environment(environ, COMMANDS["gemini-cli"], telemetry_endpoint=endpoint)
        assert "sekret" not in env.values() and {name: "kept" for name in crossing}.items() <= env.items()
    # The agent named after its command; console exporters never on a stdio agent's stdout.
    env = ce.proxy_agent_environment({"OTEL_TRACES_EXPORTER": "console,otlp,zipkin"}, ["/usr/bin/my-agent", "--acp"])
    assert env["OTEL_SERVICE_NAME"] == "my-agent" and env["OTEL_TRACES_EXPORTER"] == "otlp,zipkin"
