"""A synthetic ACP agent that exports OpenTelemetry of its own, as real agents do (the proxy tests' agent).

    python tests/proxy_peers/otel_agent.py [--process-root] [--no-session] [--export-at-exit] [--overlap N]
        [--ask] [--other-tool-id] [--internals] [--logs-first] [--tool-unreported]

Not instrumented by acp-otel: it uses the OpenTelemetry SDK itself, exporting spans, logs and metrics over
OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (what the proxy's ``--agent-telemetry`` points it at). Its spans:

* ``startup``: a root span started and ended before the first turn, exported at once;
* per prompt: ``invoke_model`` (the turn's topmost span: a root, or with ``--process-root`` a child of a process
  span that is never ended nor exported, like OpenCode's), and under it ``chat scripted`` (``gen_ai.usage.*``)
  (and ``gen_ai.input.messages``, content) and ``execute_tool read`` (``gen_ai.tool.call.id`` = the ACP tool
  call id). The two children are exported
  (force-flushed) before their parent ends, so they arrive in an earlier batch than it; a log record inside
  ``chat`` (with its context) and one without any context;
* ``shutdown``: a root span after the connection closed (after the last turn).

``--no-session``: no ``gen_ai.conversation.id`` on ``invoke_model``; ``--overlap N``: each prompt waits until N
prompts are in flight (turns of several sessions open at once); ``--export-at-exit``: nothing is exported
before the process exits (like Gemini CLI): no flush, a schedule delay of an hour, shutdown at exit; ``--ask``:
while ``execute_tool read`` is open, a ``session/request_permission`` for its tool call and an
``fs/read_text_file``; ``--other-tool-id``: ``execute_tool read`` carries a tool call id ACP never names;
``--internals``: spans of its internals as OpenCode sends them, none a user reads: under ``invoke_model`` a
``Session.get`` with a ``sql.execute`` child (a log record in it) and an HTTP ``GET`` client span, and under
``chat scripted`` an HTTP ``POST`` client span (inside a model call: read) and a ``sql.execute``;
``--logs-first``: the log record inside ``chat scripted`` is exported before any span of the turn (as Gemini CLI
does); ``--tool-unreported``: the tool's span is ``run read``, with the tool call id and no operation (a span of
the tool call that does not report it by the conventions), with a ``read file`` child of the same tool call.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

ARGS = set(sys.argv[1:])
CANARY = "CANARY-prompt-5b1e"
AT_EXIT = "--export-at-exit" in ARGS
OVERLAP = int(sys.argv[sys.argv.index("--overlap") + 1]) if "--overlap" in sys.argv else 1
DELAY_MS = 3_600_000 if AT_EXIT else 100
ASK = "--ask" in ARGS
INTERNALS = "--internals" in ARGS
LOGS_FIRST = "--logs-first" in ARGS
UNREPORTED = "--tool-unreported" in ARGS
OTHER_ID = "--other-tool-id" in ARGS

resource = Resource.create({"service.name": "otel-agent"})
provider = TracerProvider(resource=resource)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=DELAY_MS))
logs = LoggerProvider(resource=resource)
logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(), schedule_delay_millis=DELAY_MS))
meters = MeterProvider(
    resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter(), DELAY_MS)]
)
tracer = provider.get_tracer("otel-agent")
log = logging.getLogger("otel-agent")
log.propagate = False
log.addHandler(LoggingHandler(logger_provider=logs))
tokens = meters.get_meter("otel-agent").create_counter("gen_ai.client.token.usage.synthetic")


def flush() -> None:
    if not AT_EXIT:
        provider.force_flush()
        logs.force_flush()


def emit_log(body: str, span: Any = None) -> None:
    """A log record through the SDK's logging handler: with ``span``'s context, or with none."""
    if span is None:
        log.warning(body)
        return
    with trace.use_span(span):
        log.warning(body)


with tracer.start_as_current_span("startup"):
    pass
flush()
process_span = tracer.start_span("process") if "--process-root" in ARGS else None
process_ctx = trace.set_span_in_context(process_span) if process_span is not None else otel_context.Context()


def internals(top_ctx: Any, chat_ctx: Any) -> None:
    """Spans of the agent's internals (``--internals``)."""
    client = trace.SpanKind.CLIENT
    with tracer.start_as_current_span("Session.get", context=top_ctx):
        with tracer.start_as_current_span("sql.execute", attributes={"db.system.name": "sqlite"}) as sql:
            emit_log("row read", sql)
    tracer.start_span("GET", context=top_ctx, kind=client, attributes={"http.request.method": "GET"}).end()
    tracer.start_span("POST", context=chat_ctx, kind=client, attributes={"http.request.method": "POST"}).end()
    tracer.start_span("sql.execute", context=chat_ctx).end()


class OtelAgent:
    def __init__(self) -> None:
        self._conn: Any = None
        self._in_flight = 0
        self._all_in = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> dict[str, Any]:
        return {"protocolVersion": protocol_version, "agentInfo": {"name": "otel-agent", "version": "1.0"}}

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"sessionId": f"sess-{uuid.uuid4().hex[:8]}"}

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self._in_flight += 1
        if self._in_flight >= OVERLAP:
            self._all_in.set()
        await self._all_in.wait()
        attributes = {} if "--no-session" in ARGS else {"gen_ai.conversation.id": session_id}
        top = tracer.start_span("invoke_model", context=process_ctx, attributes=attributes)
        top_ctx = trace.set_span_in_context(top)
        tool_call_id = f"call-{uuid.uuid4().hex[:6]}"
        chat = tracer.start_span(
            "chat scripted",
            context=top_ctx,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.usage.output_tokens": 3,
                "gen_ai.input.messages": CANARY,  # content: the proxy scrubs it unless it captures content
            },
        )
        emit_log("model answered", chat)
        if LOGS_FIRST:
            logs.force_flush()
        if INTERNALS:
            internals(top_ctx, trace.set_span_in_context(chat))
        chat.end()
        tokens.add(15, {"gen_ai.token.type": "input"})
        await self._conn.session_update(
            session_id=session_id,
            update={"sessionUpdate": "tool_call", "toolCallId": tool_call_id, "title": "read", "kind": "read"},
        )
        tool = tracer.start_span(
            "run read" if UNREPORTED else "execute_tool read",
            context=top_ctx,
            attributes={"gen_ai.tool.call.id": tool_call_id}
            if UNREPORTED
            else {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read",
                # --other-tool-id: its span reports a tool call, never the one ACP names
                "gen_ai.tool.call.id": f"other-{tool_call_id}" if OTHER_ID else tool_call_id,
            },
        )
        if UNREPORTED:
            attributes = {"gen_ai.tool.call.id": tool_call_id}
            tracer.start_span("read file", context=trace.set_span_in_context(tool), attributes=attributes).end()
        if ASK:  # the tool call's work through the editor, while its span is open
            await self._conn.request_permission(
                session_id=session_id,
                tool_call={"toolCallId": tool_call_id, "status": "pending"},
                options=[{"optionId": "allow", "name": "Allow once", "kind": "allow_once"}],
            )
            await self._conn.read_text_file(session_id=session_id, path="/tmp/notes.txt")
        tool.end()
        await self._conn.session_update(
            session_id=session_id,
            update={"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": "completed"},
        )
        emit_log("no context here")
        flush()  # the children go out before their parent ends
        await asyncio.sleep(0.05)
        top.end()
        flush()
        self._in_flight -= 1
        return {"stopReason": "end_turn", "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}}

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        pass

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None


def main() -> None:
    import acp

    try:
        asyncio.run(acp.run_agent(OtelAgent()))
    finally:
        with tracer.start_as_current_span("shutdown"):
            pass
        meters.shutdown()
        logs.shutdown()
        provider.shutdown()


if __name__ == "__main__":
    main()
