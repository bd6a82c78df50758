"""The examples work on the plain SDK, with no tracing at all.

Each test runs ``examples/client.py`` as a user would; the client spawns
``examples/agent.py`` over stdio and prints one tagged line per event of the turn.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sdk_versions import EXAMPLES_TRANSCRIPT

pytestmark = EXAMPLES_TRANSCRIPT

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "examples" / "client.py"


def _untraced_env() -> dict[str, str]:
    # Make sure nothing turns tracing on behind our back (OTEL_* settings, or the
    # sitecustomize that `opentelemetry-instrument` puts on PYTHONPATH).
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    if "auto_instrumentation" in env.get("PYTHONPATH", ""):
        del env["PYTHONPATH"]
    return env


def run_client(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(CLIENT), *args],
        cwd=ROOT,
        env=_untraced_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"client exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def lines_with(stdout: str, tag: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(f"[{tag}] ")]


@pytest.fixture
def attachment(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("one\ntwo\nthree\n", encoding="utf-8")
    return path


def test_full_turn_with_defaults() -> None:
    out = run_client().stdout

    assert "[init] agent=example-agent version=0.1.0 protocol=1" in out
    assert len(lines_with(out, "session")) == 1
    # several streamed chunks, reassembled into one message
    assert len(lines_with(out, "chunk")) >= 3
    assert lines_with(out, "message")[0].startswith("[message] Hello! ")
    # the plan
    assert len(lines_with(out, "plan")) == 3
    assert "[plan] 1. [in_progress] (medium) Search the workspace" in out
    # one tool call through its whole lifecycle, one that fails
    assert "[tool] tool-search pending: Search the workspace for TODO (kind=search)" in out
    assert "[tool] tool-search in_progress" in out
    assert "[tool] tool-search completed: 3 matches" in out
    assert "[tool] tool-fetch failed: network unreachable" in out
    # permission granted, file read through the client
    readme = (ROOT / "examples" / "README.md").resolve()  # the client attaches the file it ships beside
    assert f"[permission] Read {readme} -> allow (allow_once)" in out
    assert f"[fs] read_text_file {readme} -> " in out
    assert re.search(r"^\[tool\] tool-read completed: \d+ lines$", out, re.MULTILINE)
    # the extension request (declared by default) and the custom notification
    assert "[ext] _example.com/workspace/buffers -> 2 buffers" in out
    assert "[notify] _example.com/progress stage=done turn=1" in out
    assert "2 open buffers" in lines_with(out, "message")[0]
    # the turn ended normally, and last
    assert out.splitlines()[-1] == "[stop] end_turn"


def test_events_arrive_in_protocol_order() -> None:
    out = run_client().stdout
    tags = [line.split("]", 1)[0] + "]" for line in out.splitlines()]
    first = {tag: tags.index(tag) for tag in dict.fromkeys(tags)}
    assert first["[chunk]"] < first["[plan]"] < first["[tool]"] < first["[permission]"] < first["[fs]"]
    assert first["[fs]"] < first["[ext]"]
    assert "[tool] tool-search completed: 3 matches" in out.split("[tool] tool-fetch pending")[0]


def test_agent_skips_undeclared_extension(attachment: Path) -> None:
    out = run_client("--no-extension", "--file", str(attachment), "--prompt", "What is in notes?").stdout

    # The agent must not call an extension method the client did not declare.
    assert lines_with(out, "ext") == []
    assert "no buffer info (extension not declared)" in out
    # Everything else still happens.
    assert f"[fs] read_text_file {attachment} -> 14 chars" in out
    assert "[tool] tool-read completed: 3 lines" in out
    assert 'You asked: "What is in notes". ' in out
    assert "[notify] _example.com/progress stage=done turn=1" in out
    assert out.splitlines()[-1] == "[stop] end_turn"


def test_agent_respects_rejected_permission(attachment: Path) -> None:
    out = run_client("--reject", "--file", str(attachment)).stdout

    assert f"[permission] Read {attachment} -> reject (reject_once)" in out
    assert "[tool] tool-read failed: permission rejected" in out
    assert lines_with(out, "fs") == []  # no read after a rejection
    assert "I did not read the file" in out
    assert out.splitlines()[-1] == "[stop] end_turn"


def test_missing_file_fails_the_tool_call_not_the_turn(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    out = run_client("--file", str(missing)).stdout

    assert f"[fs] read_text_file {missing} -> error" in out
    assert "[tool] tool-read failed: read failed:" in out
    assert out.splitlines()[-1] == "[stop] end_turn"


def test_main_can_be_called_from_code(attachment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # instrument_explicit.py and tracing tests call client.main() in-process.
    spec = importlib.util.spec_from_file_location("example_client_under_test", CLIENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert asyncio.run(module.main(["--file", str(attachment)])) == 0
    out = capsys.readouterr().out
    assert "[tool] tool-read completed: 3 lines" in out
    assert "[ext] _example.com/workspace/buffers -> 2 buffers" in out
    assert out.splitlines()[-1] == "[stop] end_turn"
