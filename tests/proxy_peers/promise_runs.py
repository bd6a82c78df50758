"""Running ``acp-otel proxy --agent-telemetry`` over the plan-driven agent (``promise_agent.py``) in the tests of
the option's promises: the agent laid out as a known agent's package, its environment read from ``/proc``."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from acp_app import open_session, prompt
from harness import PEERS, proxied_client

# The package each profile is found by from the agent's command (``node .../<package>/dist/index.js`` is how these
# agents are started: the profile lookup reads the nearest package.json's name).
PACKAGES = {
    "gemini-cli": "@google/gemini-cli",
    "qwen-code": "@qwen-code/qwen-code",
    "claude-code": "@zed-industries/claude-agent-acp",
    "opencode": "opencode-ai",
    "none": "promise-agent",
}


def agent_command(directory: Path, profile: str, plan: dict[str, Any]) -> list[str]:
    """``python DIR/<profile>/dist/index.py PLAN`` beside a package.json naming ``profile``'s package."""
    package = directory / profile
    (package / "dist").mkdir(parents=True, exist_ok=True)
    (package / "package.json").write_text(json.dumps({"name": PACKAGES[profile], "version": "1.0.0"}))
    script = package / "dist" / "index.py"
    shutil.copyfile(PEERS / "promise_agent.py", script)
    plan_file = package / "plan.json"
    plan_file.write_text(json.dumps(plan))
    return [sys.executable, str(script), str(plan_file)]


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return out


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def agent_environ(proxy_pid: int, script: str) -> dict[str, str]:
    """The environment of the proxy's child that runs ``script`` (the running agent's, from /proc)."""
    for child in children(proxy_pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if script.encode() in cmdline:
            return environ_of(child)
    raise AssertionError(f"no child of the proxy {proxy_pid} runs {script}")


async def run(
    command: list[str],
    env: dict[str, str],
    proxy_args: list[str] = (),  # type: ignore[assignment]
    turns: int = 1,
    pause: float = 0.0,
    telemetry: bool = True,
) -> Any:
    """Proxy ``command`` with ``--agent-telemetry``: one session, ``turns`` prompts (``pause`` seconds after each);
    the agent's environment read while it runs (``run.extra["agent_env"]``)."""
    args = ["--service-name", "proxy", *(["--agent-telemetry"] if telemetry else []), *proxy_args]
    async with proxied_client(command, env, args) as proxied:
        session_id = await open_session(proxied.conn)
        proxied.extra["agent_env"] = agent_environ(proxied.proc.pid, command[1])
        for _ in range(turns):
            await prompt(proxied.conn, session_id, "hi")
            await asyncio.sleep(pause)
    return proxied


def all_bytes(backend: Any) -> bytes:
    """Everything the backend received, serialized."""
    return b"".join(m.SerializeToString() for signal in ("traces", "logs", "metrics") for m in backend.requests[signal])


def agent_spans(backend: Any) -> list[dict[str, Any]]:
    return [s for s in backend.spans() if s["service"] == "promise-agent"]


def proxy_turns(backend: Any) -> list[dict[str, Any]]:
    return [
        s
        for s in backend.spans()
        if s["service"] == "proxy" and s["attributes"].get("gen_ai.operation.name") == "invoke_agent"
    ]
