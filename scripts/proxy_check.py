"""wheel_check: one ``initialize`` through ``acp-otel proxy`` to the packaged example agent, traced.

Run by scripts/wheel_check.sh from a fresh virtual environment holding only the built wheel (plus the SDK):
the agent answers through the proxy, stdout holds the agent's answer and nothing else, and the proxy's
CLIENT span for the request arrives at a loopback OTLP receiver with the service name given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import acp_otel._demo.examples as examples
from acp_otel._demo.receiver import OtlpReceiver


def main(acp_otel_command: str) -> None:
    agent = Path(examples.__file__).parent / "agent.py"
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientCapabilities": {},
            "clientInfo": {"name": "wheel-check", "version": "1"},
        },
    }
    with OtlpReceiver() as receiver:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
        }
        command = [acp_otel_command, "proxy", "--service-name", "wheel-proxy", "--", sys.executable, str(agent)]
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdin is not None and proc.stdout is not None
        watchdog = threading.Timer(60, proc.kill)
        watchdog.start()
        try:
            # stdin stays open until the answer is in: an agent may cancel what is in flight at end of input.
            proc.stdin.write(json.dumps(initialize) + "\n")
            proc.stdin.flush()
            first = proc.stdout.readline()
            rest, stderr = proc.communicate()  # closes stdin: the proxy and the agent end
        finally:
            watchdog.cancel()
        assert proc.returncode == 0, (proc.returncode, stderr[-2000:])
        assert first and not rest, f"stdout must hold only the agent's answer: {(first + rest)[:2000]!r}"
        answer = json.loads(first)
        assert answer["id"] == 0 and "agentInfo" in answer["result"], answer
        spans = receiver.wait_for(lambda got: any(s.name == "initialize" for s in got), timeout=15)
    span = next(s for s in spans if s.name == "initialize")
    assert span.service_name == "wheel-proxy" and span.kind == "CLIENT", (span.service_name, span.kind)
    print(f"acp-otel proxy: ok, initialize answered by {answer['result']['agentInfo'].get('name')}, span exported")


if __name__ == "__main__":
    main(sys.argv[1])
