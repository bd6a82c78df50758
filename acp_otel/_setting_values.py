"""The values the mode settings take: constants only, so that the proxy's command line offers them without
importing :mod:`acp_otel._settings` (and what it imports) before the agent is started."""

# turn: session/update inside a turn has no span (counted / events on the turn or tool span);
# all: a span per notification; events: an event per session/update on the turn; none: no notification spans.
NOTIFICATION_SPAN_MODES = ("turn", "all", "none", "events")
# auto: the side closest to the tool makes tool spans; always / never override.
TOOL_SPAN_MODES = ("auto", "always", "never")
# auto: the side closest to the agent reports token usage, cost and context window; always / never override.
USAGE_MODES = ("auto", "always", "never")
# genai: the agent's own spans a user reads (model calls, tool calls, agent invocations, HTTP client calls inside
# them, their ancestors); all: every span it sends.
AGENT_TELEMETRY_SPAN_MODES = ("genai", "all")
