"""``acp-otel proxy -- CMD [ARGS...]``: trace any ACP agent from any editor.

The proxy is the engine's second adapter, beside the SDK one: it relays the agent's stdio byte for
byte (:mod:`.framing`), feeds every message through :class:`acp_otel._engine.Engine` (:mod:`.tracing`),
writes the trace keys into forwarded messages without re-serialising them (:mod:`.splice`), and runs
the agent's process lifecycle (:mod:`.process`) with telemetry from the ``OTEL_*`` environment
(:mod:`.telemetry`). Only :mod:`.options` is imported when the command line is built.
"""
