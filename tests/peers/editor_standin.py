"""An editor stand-in: the ACP Python SDK's client driving one turn of the example agent over stdio.

    python editor_standin.py [--agent-env JSON] [--grace SECONDS] -- AGENT COMMAND...

It spawns the agent as an editor does (``spawn_agent_process``: trimmed environment plus ``--agent-env``,
the agent's stderr passed through), runs ``initialize``, ``session/new`` and one prompt with the example
client's handlers, then leaves the spawn context (closes the agent's stdin, waits up to ``--grace``
seconds, 2 by default as in the SDK, then SIGTERM, ...) and prints one JSON line on stdout:
``{"stop": ..., "returncode": ..., "shutdown_s": ...}``, where ``shutdown_s`` is how long leaving the
context took and ``returncode`` the agent's exit status (-15: the SDK had to terminate it). Run it under
``opentelemetry-instrument`` for a zero-code traced editor.
It then exits at once (``os._exit``): its own exporters' exit is not what the tests look at.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "acp_otel" / "_demo" / "examples"


def _example_client() -> object:
    spec = importlib.util.spec_from_file_location("editor_standin_example_client", EXAMPLES / "client.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def run(command: list[str], agent_env: dict[str, str], grace: float) -> dict[str, object]:
    from acp import PROTOCOL_VERSION, spawn_agent_process
    from acp.schema import ClientCapabilities, FileSystemCapabilities, TextContentBlock

    example = _example_client()
    client = example.ExampleClient()  # type: ignore[attr-defined]
    context = spawn_agent_process(
        client,
        command[0],
        *command[1:],
        env=agent_env or None,
        transport_kwargs={"stderr": None, "shutdown_timeout": grace},
    )
    conn, process = await context.__aenter__()
    try:
        await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True)),
        )
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        response = await conn.prompt(
            session_id=session.session_id, prompt=[TextContentBlock(type="text", text="hello")]
        )
    finally:
        started = time.monotonic()
        await context.__aexit__(None, None, None)
        shutdown_s = time.monotonic() - started
    return {"stop": str(response.stop_reason), "returncode": process.returncode, "shutdown_s": shutdown_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent-env", default="{}", help="JSON object: the env= of the spawn")
    parser.add_argument("--grace", type=float, default=2.0, help="seconds between closing stdin and SIGTERM")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    result = asyncio.run(run(command, json.loads(args.agent_env), args.grace))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
