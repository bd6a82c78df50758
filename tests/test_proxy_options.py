"""``acp-otel proxy`` options: the command line, and that the flags reach the engine's settings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from acp_app import initialize
from harness import PROXY, PY_AGENT, RAW_PEER, base_env, proxied_client
from otlp_sink import OtlpSink

from acp_otel._proxy.options import options_from_args
from acp_otel._settings import load_settings
from acp_otel.cli import build_parser


def test_help_names_the_command_form() -> None:
    out = subprocess.run([*PROXY, "--help"], capture_output=True, text=True, timeout=60, env=base_env())
    assert out.returncode == 0 and "-- CMD [ARGS...]" in out.stdout and "OTEL_" in out.stdout


def test_flags_become_settings_and_the_command_is_kept_whole() -> None:
    flags = ["--capture-content", "--notification-spans", "none", "--no-inject", "--tool-spans", "never"]
    args = build_parser().parse_args(
        ["proxy", *flags, "--service-name", "svc", "--", "agent", "--capture-content", "--", "x"]
    )
    options = options_from_args(args, environ={})
    assert options.command == ("agent", "--capture-content", "--", "x")  # the agent's own flags untouched
    assert options.service_name == "svc"
    settings = load_settings(options.settings_options, environ={})
    assert settings.capture_content is True and settings.notification_spans == "none" and settings.inject is False
    assert settings.tool_spans == "never"


def test_tool_name_and_extra_key_flags_become_settings() -> None:
    flags = ["--tool-names-from-titles", "--extra-trace-keys", "qwen,acme.traceparent"]
    options = options_from_args(build_parser().parse_args(["proxy", *flags, "--", "agent"]), environ={})
    settings = load_settings(options.settings_options, environ={})
    assert settings.tool_names_from_titles == "prefix"  # the identifier alone or before a colon
    assert settings.extra_trace_keys == ("qwen.telemetry.traceparent", "qwen.telemetry.tracestate", "acme.traceparent")


def test_no_flags_leave_the_environment_in_charge() -> None:
    options = options_from_args(build_parser().parse_args(["proxy", "--", "agent"]), environ={})
    settings = load_settings(options.settings_options, environ={"OTEL_PYTHON_ACP_CAPTURE_CONTENT": "true"})
    assert settings.capture_content is True and not options.verbose


def test_no_command_is_an_error() -> None:
    out = subprocess.run([*PROXY], capture_output=True, text=True, timeout=60, env=base_env())
    assert out.returncode == 2 and out.stdout == "" and "no agent command" in out.stderr


@pytest.mark.e2e
def test_capture_content_and_notification_spans_flags_reach_the_spans(tmp_path: Path) -> None:
    send = tmp_path / "send"
    send.write_bytes(b"")
    lines = (
        b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":'
        b'[{"type":"text","text":"CAPTURED-PROMPT"}]}}\n'
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}\n'
    )
    with OtlpSink() as sink:
        proc = subprocess.run(
            [
                *PROXY,
                "--capture-content",
                "--notification-spans",
                "none",
                "--",
                *RAW_PEER,
                str(tmp_path / "r"),
                str(send),
            ],
            input=lines,
            capture_output=True,
            timeout=60,
            env=base_env(**sink.env()),
        )
        spans = sink.wait_for(lambda s: any(x.attributes.get("acp.method.name") == "session/prompt" for x in s))
    assert proc.returncode == 0
    (turn,) = [s for s in spans if s.attributes.get("acp.method.name") == "session/prompt"]
    assert "CAPTURED-PROMPT" in repr(turn.attributes)
    assert not [s for s in spans if s.kind == "PRODUCER"]


@pytest.mark.e2e
async def test_inject_excluded_methods_keeps_a_strict_untraced_agent_working() -> None:
    """An untraced Python SDK agent whose initialize takes no **kwargs fails on an injected traceparent
    (the SDK spreads _meta into keyword arguments); excluding initialize from injection keeps it working."""
    with OtlpSink() as sink:
        env = base_env(**sink.env())
        async with proxied_client([*PY_AGENT, "nokwargs"], env) as run:
            with pytest.raises(Exception) as failed:
                await initialize(run.conn)
            assert getattr(failed.value, "code", None) == -32603
        async with proxied_client([*PY_AGENT, "nokwargs"], env, ["--inject-excluded-methods", "initialize"]) as run:
            init = await initialize(run.conn)
            await run.conn.new_session(cwd="/tmp", mcp_servers=[])  # still injected: its handler takes **kwargs
        assert init.protocol_version == 1 and run.returncode == 0
