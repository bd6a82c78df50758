"""The proxy's own ``execute_tool`` spans, noted as they start, so that the agent's spans of a tool call the proxy
reports (the agent's spans do not report it by the conventions) hang under the proxy's span of it (docs/proxy.md,
"Each fact once"). Under ``--agent-telemetry`` only; fed by the engine's early tracer (spans started before the
SDK is set up) and by a span processor of the proxy's tracer provider. Light: imported before the agent starts."""

from __future__ import annotations

import threading
from collections import OrderedDict

TYPE_CHECKING = False  # not typing's: imported before the agent starts (type checkers see True)
if TYPE_CHECKING:
    from typing import Any

MAX_KNOWN = 4096
"""Tool spans remembered; the oldest are forgotten first."""


class ProxyToolSpans:
    """(trace id, tool call id) -> span id of each ``execute_tool`` span of the proxy's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: OrderedDict[tuple[bytes, str], bytes] = OrderedDict()

    def started(self, span: Any, attributes: Any) -> None:
        """A span of the proxy's started, with these attributes."""
        if not attributes or attributes.get("gen_ai.operation.name") != "execute_tool":
            return
        tool_call_id = attributes.get("gen_ai.tool.call.id")
        context = span.get_span_context()
        if type(tool_call_id) is str and context.is_valid:
            key = (context.trace_id.to_bytes(16, "big"), tool_call_id)
            with self._lock:
                self._spans[key] = context.span_id.to_bytes(8, "big")
                if len(self._spans) > MAX_KNOWN:
                    self._spans.popitem(last=False)

    def lookup(self, trace_id: bytes, tool_call_id: str) -> bytes | None:
        """The proxy's ``execute_tool`` span of ``tool_call_id`` in trace ``trace_id``, if it made one."""
        with self._lock:
            return self._spans.get((trace_id, tool_call_id))

    def processor(self) -> Any:
        """A span processor that notes the spans the SDK's tracer starts."""
        from opentelemetry.sdk.trace import SpanProcessor

        notes = self

        class _Notes(SpanProcessor):
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                notes.started(span, span.attributes)

            # The base class of older SDKs (1.27, our floor) returns None here, which stops the provider's
            # flush before the batch processor added after this one: the proxy's spans were never exported.
            def force_flush(self, timeout_millis: int = 30000) -> bool:
                return True

        return _Notes()
