"""A synthetic ACP agent that exports what a plan says, with the real OpenTelemetry SDK (the agent-telemetry
promise tests' agent).

    python tests/proxy_peers/promise_agent.py PLAN.json

Not instrumented by acp-otel: it exports over OTLP/HTTP (protobuf) to ``OTEL_EXPORTER_OTLP_ENDPOINT``, where
``acp-otel proxy --agent-telemetry`` points it. The plan (JSON) holds lists of steps, run in order:

* ``turn``: in each ``session/prompt``, before its answer; ``after_turn``: 0.5 s after each answer (background
  work between turns); ``at_exit``: once the connection closed.
* steps: ``{"span": NAME, "ref": R, "parent": R2, "attrs": {...}, "end": true}`` starts a span (under the span
  ``R2`` of the same list, else a root) and ends it at once unless ``"end": false``; ``{"end_span": R}``;
  ``{"event": NAME, "on": R, "attrs": {...}}`` a span event; ``{"log": BODY, "on": R, "attrs": {...},
  "event_name": E}`` a log record (in span ``R``'s context, else none); ``{"flush": true}``; ``{"sleep": S}``;
  ``{"tool_call": true}`` an ACP tool call (``tool_call`` then ``completed``), whose id replaces ``$TOOL`` in
  the attributes of the steps after it; ``{"post_json": PAYLOAD}`` an OTLP/JSON traces request, posted
  (a refusal ignored) once ``$TRACE``, ``$SPAN1``..``$SPAN3`` (fresh hex ids) and ``$NOW`` (the time, ns) are put in.

``usage``: the ``PromptResponse.usage`` of each answer (none when absent); ``name``: its ``agentInfo.name``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

with open(sys.argv[1], encoding="utf-8") as handle:
    PLAN: dict[str, Any] = json.load(handle)

resource = Resource.create({"service.name": "promise-agent"})
provider = TracerProvider(resource=resource)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=100))
logs = LoggerProvider(resource=resource)
logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(), schedule_delay_millis=100))
tracer = provider.get_tracer("promise-agent")
logger = logs.get_logger("promise-agent")


def _emit(body: Any, attributes: Any, event_name: str | None, span: Any) -> None:
    """A log record in ``span``'s context (none: no context)."""
    context = trace.set_span_in_context(span) if span is not None else None
    try:
        logger.emit(body=body, attributes=attributes, event_name=event_name, context=context)  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # older SDKs (the floors): a record of the SDK's own, and no event name field
        from opentelemetry._logs import SeverityNumber
        from opentelemetry.sdk._logs import LogRecord

        ids = span.get_span_context() if span is not None else trace.INVALID_SPAN_CONTEXT
        record = LogRecord(
            timestamp=time.time_ns(),
            trace_id=ids.trace_id,
            span_id=ids.span_id,
            trace_flags=ids.trace_flags,
            severity_number=SeverityNumber.INFO,
            body=body,
            attributes=attributes,
            resource=resource,
        )
        logger.emit(record)


def _put(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, replacement in names.items():
            value = value.replace(name, replacement)
        return value
    if isinstance(value, list):
        return [_put(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _put(v, names) for k, v in value.items()}
    return value


async def run_steps(steps: list[dict[str, Any]], conn: Any = None, session_id: str = "") -> None:
    spans: dict[str, Any] = {}
    names: dict[str, str] = {}
    for step in steps:
        step = _put(step, names)
        if "span" in step:
            parent = spans.get(step.get("parent", ""))
            context = trace.set_span_in_context(parent) if parent is not None else None
            span = tracer.start_span(step["span"], context=context, attributes=step.get("attrs", {}))
            spans[step.get("ref", step["span"])] = span
            if step.get("end", True):
                span.end()
        elif "end_span" in step:
            spans[step["end_span"]].end()
        elif "event" in step:
            spans[step["on"]].add_event(step["event"], attributes=step.get("attrs", {}))
        elif "log" in step:
            _emit(step["log"], step.get("attrs") or None, step.get("event_name"), spans.get(step.get("on", "")))
        elif "flush" in step:
            provider.force_flush()
            logs.force_flush()
        elif "sleep" in step:
            await asyncio.sleep(step["sleep"])
        elif "tool_call" in step:
            names["$TOOL"] = tool_call_id = f"call-{uuid.uuid4().hex[:6]}"
            for status in (None, "completed"):
                update: dict[str, Any] = {"toolCallId": tool_call_id}
                if status is None:
                    update.update(sessionUpdate="tool_call", title="read", kind="read")
                else:
                    update.update(sessionUpdate="tool_call_update", status=status)
                await conn.session_update(session_id=session_id, update=update)
        elif "post_json" in step:
            ids = {"$TRACE": os.urandom(16).hex(), "$NOW": str(time.time_ns())}
            ids.update({f"$SPAN{n}": os.urandom(8).hex() for n in (1, 2, 3)})
            body = json.dumps(_put(step["post_json"], ids)).encode()
            endpoint = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
            request = urllib.request.Request(endpoint, body, {"Content-Type": "application/json"})
            await asyncio.to_thread(_post, request)


def _post(request: urllib.request.Request) -> None:
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
    except urllib.error.HTTPError:  # refused: an exporter says so in its own log, and goes on
        pass


class PromiseAgent:
    def __init__(self) -> None:
        self._conn: Any = None
        self._later: list[asyncio.Task[None]] = []

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> dict[str, Any]:
        name = PLAN.get("name", "promise-agent")
        return {"protocolVersion": protocol_version, "agentInfo": {"name": name, "version": "1.0"}}

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"sessionId": f"sess-{uuid.uuid4().hex[:8]}"}

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        await run_steps(PLAN.get("turn", []), self._conn, session_id)
        if PLAN.get("after_turn"):
            self._later.append(asyncio.create_task(self._after_turn()))
        answer: dict[str, Any] = {"stopReason": "end_turn"}
        if PLAN.get("usage"):
            answer["usage"] = PLAN["usage"]
        return answer

    async def _after_turn(self) -> None:
        await asyncio.sleep(0.5)
        await run_steps(PLAN["after_turn"])

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        pass

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None


def main() -> None:
    import acp

    try:
        asyncio.run(acp.run_agent(PromiseAgent()))
    finally:
        asyncio.run(run_steps(PLAN.get("at_exit", [])))
        logs.shutdown()
        provider.shutdown()


if __name__ == "__main__":
    main()
