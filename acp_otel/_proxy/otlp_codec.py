"""OTLP/HTTP request bodies to ``opentelemetry.proto`` messages and back: protobuf and JSON, gzip and deflate.

OTLP/JSON is protobuf's JSON mapping with two differences that ``json_format`` does not know: trace and span ids
are hex strings (not base64), and enums may be given as integers (``json_format`` takes those already). Keys
may be lowerCamelCase or the proto field names; unknown fields are ignored, as the specification asks.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRACES, METRICS, LOGS = "traces", "metrics", "logs"
SIGNALS = (TRACES, METRICS, LOGS)
MAX_BODY_BYTES = 32 * 1024 * 1024
"""A request body, decompressed, may be at most this long (a bigger one is refused with 413)."""

_REQUESTS: dict[str, type[Message]] = {
    TRACES: ExportTraceServiceRequest,
    METRICS: ExportMetricsServiceRequest,
    LOGS: ExportLogsServiceRequest,
}
_RESPONSES: dict[str, type[Message]] = {
    TRACES: ExportTraceServiceResponse,
    METRICS: ExportMetricsServiceResponse,
    LOGS: ExportLogsServiceResponse,
}
_ID_KEYS = frozenset(("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"))


class BadRequest(ValueError):
    """A body that cannot be decoded (the receiver answers 400, or 413 when ``too_large``)."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def signal_of(path: str) -> str | None:
    """``traces`` / ``metrics`` / ``logs`` for an OTLP/HTTP path (``/v1/traces``), else ``None``."""
    path = path.split("?", 1)[0].rstrip("/")
    for signal in SIGNALS:
        if path.endswith("/v1/" + signal):
            return signal
    return None


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` names OTLP/JSON (anything else is taken as protobuf)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


def decompress(body: bytes, encoding: str | None) -> bytes:
    """``body`` decoded as its ``Content-Encoding`` says (gzip, deflate or none), at most :data:`MAX_BODY_BYTES`."""
    encoding = (encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate", "x-gzip"):
        raise BadRequest(f"unsupported Content-Encoding {encoding!r}")
    # gzip: a gzip header (wbits 16+); deflate: zlib's, or raw deflate from a client that read the RFC loosely.
    for wbits in (zlib.MAX_WBITS | 16,) if encoding != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS):
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, MAX_BODY_BYTES + 1)
        except zlib.error:
            continue
        if len(out) > MAX_BODY_BYTES:
            raise BadRequest("body too large once decompressed", too_large=True)
        return out
    raise BadRequest(f"body is not valid {encoding}")


def decode(signal: str, body: bytes, json_body: bool) -> Message:
    """The export request of ``signal`` in ``body`` (protobuf, or OTLP/JSON when ``json_body``)."""
    message = _REQUESTS[signal]()
    if json_body:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise BadRequest(f"not JSON: {exc}") from None
        try:
            json_format.ParseDict(_ids_to_base64(data), message, ignore_unknown_fields=True)
        except (json_format.ParseError, TypeError, ValueError, RecursionError) as exc:
            raise BadRequest(f"not an OTLP/JSON {signal} request: {exc}") from None
        return message
    try:
        message.ParseFromString(body)
    except (DecodeError, RecursionError) as exc:
        raise BadRequest(f"not an OTLP/protobuf {signal} request: {exc}") from None
    return message


def response(signal: str, json_body: bool) -> tuple[bytes, str]:
    """An empty (full success) export response of ``signal`` and its content type."""
    if json_body:
        return b"{}", "application/json"
    return _RESPONSES[signal]().SerializeToString(), "application/x-protobuf"


def _ids_to_base64(value: Any) -> Any:
    """OTLP/JSON's hex ids as the base64 ``json_format`` expects for bytes (other values as they are)."""
    if type(value) is dict:
        out = {}
        for key, item in value.items():
            if key in _ID_KEYS and type(item) is str:
                try:
                    item = base64.b64encode(bytes.fromhex(item)).decode("ascii")
                except ValueError:
                    pass  # not hex: base64 already, or invalid (json_format says which)
            else:
                item = _ids_to_base64(item)
            out[key] = item
        return out
    if type(value) is list:
        return [_ids_to_base64(item) for item in value]
    return value
