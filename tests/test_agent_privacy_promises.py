"""What ``acp-otel proxy --agent-telemetry`` promises of the agent's privacy, through the real proxy: a synthetic
agent (``tests/proxy_peers/promise_agent.py``, the real OpenTelemetry SDK) laid out as each profiled agent's
package exports every content attribute and log body the GenAI conventions and that agent use; with capture off
none of it reaches the backend, with capture on all of it does. The agent's environment, read from
``/proc/PID/environ`` of the running agent: the proxy's exporter settings (the backend's credentials) never in
it; each profile's content switches off with capture off, on with capture on.

The lists of content keys are written out here, not imported from the scrubber: a key the scrubber forgets
must fail a test."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from harness import base_env
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from otlp_backend import Backend
from promise_runs import agent_command, agent_spans, all_bytes, run

pytestmark = pytest.mark.e2e

# The GenAI conventions' content attributes, current, deprecated and indexed.
# A log record's own event name field: opentelemetry-proto 1.35 and later (the SDK of the same release writes it);
# on older ones the agent names its events by the attribute only (the unit tests read the field from the wire).
EVENT_NAME_FIELD = "event_name" in LogRecord.DESCRIPTOR.fields_by_name
CONVENTION_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.0.tool_calls.0.arguments",
)
# The former GenAI events whose log body is a message.
CONTENT_EVENTS = (
    "gen_ai.system.message",
    "gen_ai.user.message",
    "gen_ai.assistant.message",
    "gen_ai.tool.message",
    "gen_ai.choice",
)
# What each profiled agent writes of its own (docs/agent-telemetry.md).
AGENT_KEYS = {
    "gemini-cli": ("prompt", "request_text", "response_text", "function_args", "response"),
    "qwen-code": (
        "prompt",
        "request_text",
        "response_text",
        "function_args",
        "result",
        "execution_summary",
        "input.value",
        "output.value",
    ),
    "claude-code": (
        "user_prompt",
        "prompt",
        "system_prompt",
        "tool_parameters",
        "tool_input",
        "tool.output",
        "response.model_output",
    ),
    "opencode": (  # the AI SDK's spans (experimental.openTelemetry)
        "ai.prompt",
        "ai.prompt.messages",
        "ai.prompt.tools",
        "ai.response.text",
        "ai.response.reasoning",
        "ai.response.toolCalls",
        "ai.response.object",
        "ai.toolCall.args",
        "ai.toolCall.result",
        "ai.telemetry.metadata.userId",
    ),
    "none": (),
}
# OpenCode's log lines: a message, then details that carry paths and commands.
OPENCODE_DETAILS = "{pattern: 'cat CANARY-opencode-details'}"
# Each profile's content switches: (variable, value with capture on, value with capture off).
CONTENT_SWITCHES = {
    "claude-code": (
        ("OTEL_LOG_USER_PROMPTS", "1", "0"),
        ("OTEL_LOG_TOOL_DETAILS", "1", "0"),
        ("OTEL_LOG_TOOL_CONTENT", "1", "0"),
    ),
    "qwen-code": (
        ("QWEN_TELEMETRY_LOG_PROMPTS", "true", "false"),
        ("QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES", "true", "false"),
    ),
    "gemini-cli": (("GEMINI_TELEMETRY_LOG_PROMPTS", "true", "false"),),
    "opencode": (),
    "none": (),
}
PROFILES = tuple(AGENT_KEYS)


def _canaries(profile: str) -> tuple[dict[str, Any], list[str]]:
    """The agent's plan for one turn, and every canary it sends."""
    keys = (*CONVENTION_KEYS, *AGENT_KEYS[profile])
    canaries: list[str] = []

    def attrs(place: str) -> dict[str, str]:
        out = {key: f"CANARY-{place}-{key}" for key in keys}
        canaries.extend(out.values())
        return out

    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted", **attrs("span")}
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read", **attrs("tool")}
    steps: list[dict[str, Any]] = [
        {"span": "chat scripted", "ref": "chat", "attrs": chat, "end": False},
        {"event": "gen_ai.content", "on": "chat", "attrs": attrs("event")},
        {"span": "execute_tool read", "parent": "chat", "attrs": tool},
        {"log": "details", "on": "chat", "attrs": attrs("log")},
    ]
    for event in CONTENT_EVENTS:
        for how in ("attribute", "field") if EVENT_NAME_FIELD else ("attribute",):  # as the record's field: newer
            body = f"CANARY-{how}-{event}"
            canaries.append(body)
            step: dict[str, Any] = {"log": body, "on": "chat"}
            if how == "attribute":
                step["attrs"] = {"event.name": event}
            else:
                step["event_name"] = event
            steps.append(step)
    if profile == "opencode":
        steps.append({"log": ["evaluated", OPENCODE_DETAILS], "on": "chat"})
        canaries.append("CANARY-opencode-details")
    steps += [{"end_span": "chat"}, {"flush": True}]
    return {"turn": steps}, canaries


# Every variable of the proxy's environment that configures its exporters (credentials among them).
EXPORTER_SECRETS = {
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20sekret-all",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-key=sekret-traces",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-key=sekret-logs",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-key=sekret-metrics",
    "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    "OTEL_EXPORTER_OTLP_TIMEOUT": "9000",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER": "sekret_provider",
    "OTEL_PYTHON_EXPORTER_OTLP_GRPC_CREDENTIAL_PROVIDER": "sekret_grpc_provider",
}
CERTIFICATE_SETTINGS = (
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
)


class Outcome:
    def __init__(self, sent: bytes, canaries: list[str], agent_env: dict[str, str], proxy_env: dict[str, str]) -> None:
        self.sent, self.canaries, self.agent_env, self.proxy_env = sent, canaries, agent_env, proxy_env


async def _outcome(tmp: Path, profile: str, capture: bool) -> Outcome:
    plan, canaries = _canaries(profile)
    command = agent_command(tmp, profile, plan)
    certificate = tmp / "sekret-cert.pem"
    certificate.write_text("not a certificate")
    with Backend() as backend:
        proxy_env = base_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint,
            OTEL_METRICS_EXPORTER="none",
            OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS="all",
            **EXPORTER_SECRETS,
            **{name: str(certificate) for name in CERTIFICATE_SETTINGS},
        )
        proxied = await run(command, proxy_env, ["--capture-content"] if capture else [])
        assert proxied.returncode == 0, proxied.stderr
        # The agent's spans and its 11 log records (12 for OpenCode; 5 fewer on protos without the event name field)
        # reached the backend (scrubbed or not).
        expected_logs = 1 + (2 if EVENT_NAME_FIELD else 1) * len(CONTENT_EVENTS) + (profile == "opencode")
        assert backend.wait_for(
            lambda b: (
                {s["name"] for s in agent_spans(b)} >= {"chat scripted", "execute_tool read"}
                and len([r for r in b.logs() if r["resource"].get("service.name") == "promise-agent"]) >= expected_logs
            )
        ), proxied.stderr
        sent = all_bytes(backend)
    return Outcome(sent, canaries, proxied.extra["agent_env"], proxy_env)


@pytest.fixture(
    scope="module",
    params=[(p, c) for p in PROFILES for c in (False, True)],
    ids=lambda p: f"{p[0]}-{'capture' if p[1] else 'no-capture'}",
)
def outcome(request: Any, tmp_path_factory: Any) -> tuple[str, bool, Outcome]:
    profile, capture = request.param
    tmp = tmp_path_factory.mktemp(f"{profile}-{capture}")
    return profile, capture, asyncio.run(_outcome(tmp, profile, capture))


def test_no_content_reaches_the_backend_without_capture_and_all_of_it_with(outcome: Any) -> None:
    profile, capture, got = outcome
    arrived = [c for c in got.canaries if c.encode() in got.sent]
    if capture:
        assert arrived == got.canaries, f"{profile}: missing with capture on: {set(got.canaries) - set(arrived)}"
    else:
        assert arrived == [], f"{profile}: content reached the backend with capture off: {arrived}"
    assert b"scripted" in got.sent  # what is not content goes through either way
    if profile == "opencode":  # its log line's message stays
        assert b"evaluated" in got.sent


def test_the_agents_content_switches_follow_capture(outcome: Any) -> None:
    profile, capture, got = outcome
    for name, on, off in CONTENT_SWITCHES[profile]:
        assert got.agent_env.get(name) == (on if capture else off), (profile, name)
    # The GenAI instrumentations' switch (any agent): off unless the proxy captures content.
    genai = got.agent_env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    assert genai == (None if capture else "NO_CONTENT")


def test_the_proxys_exporter_settings_never_reach_the_agent(outcome: Any) -> None:
    _profile, _capture, got = outcome
    configured = [n for n in got.proxy_env if n.startswith(("OTEL_EXPORTER_", "OTEL_PYTHON_EXPORTER_"))]
    assert set(EXPORTER_SECRETS) | set(CERTIFICATE_SETTINGS) <= set(configured)
    receiver = got.agent_env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert receiver.startswith("http://127.0.0.1:") and receiver != got.proxy_env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert got.agent_env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"  # the receiver's
    _never_the_proxys(
        configured, got.agent_env, got.proxy_env, ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL")
    )


def _never_the_proxys(
    configured: list[str], agent_env: dict[str, str], proxy_env: dict[str, str], receivers: tuple[str, ...]
) -> None:
    for name in configured:
        if name not in receivers:
            assert name not in agent_env, name
    environment = "\0".join(agent_env.values())
    assert "sekret" not in environment and proxy_env["OTEL_EXPORTER_OTLP_ENDPOINT"] not in environment


async def test_without_the_option_the_proxys_exporter_settings_never_reach_the_agent_either(tmp_path: Path) -> None:
    command = agent_command(tmp_path, "gemini-cli", {})
    certificate = tmp_path / "sekret-cert.pem"
    certificate.write_text("not a certificate")
    proxy_env = base_env(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9/sekret-endpoint",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        **EXPORTER_SECRETS,
        **{name: str(certificate) for name in CERTIFICATE_SETTINGS},
    )
    proxied = await run(command, proxy_env, telemetry=False)
    assert proxied.returncode == 0, proxied.stderr
    configured = [n for n in proxy_env if n.startswith(("OTEL_EXPORTER_", "OTEL_PYTHON_EXPORTER_"))]
    _never_the_proxys(configured, proxied.extra["agent_env"], proxy_env, ())
