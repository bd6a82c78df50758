"""One traced zero-code turn from an installed acp-otel: the check ``scripts/wheel_check.sh`` runs.

Run with the Python of a virtual environment that has the acp-otel wheel and the ACP SDK installed
(not the source tree): it starts the package's OTLP receiver on loopback, runs

    opentelemetry-instrument python .../acp_otel/_demo/examples/client.py

(the client spawns the example agent, which acp-otel traces through the inherited environment), and
checks that the spans of both processes arrive as one trace. Exit status 0 when they do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import acp_otel
import acp_otel._demo.examples
from acp_otel._demo.receiver import OtlpReceiver, ReceivedSpan

CLIENT_SERVICE = "zero-code-client"
AGENT_SERVICE = "agent"  # derived from `python .../agent.py`


def _method(span: ReceivedSpan) -> str:
    return span.name.partition(" ")[0]  # a turn is named `session/prompt {agent}`


def _one(spans: list[ReceivedSpan], name: str, kind: str, service: str) -> ReceivedSpan:
    found = [s for s in spans if (_method(s), s.kind, s.service_name) == (name, kind, service)]
    if len(found) != 1:
        raise SystemExit(f"expected one {kind} {name} span of {service}, got {len(found)}")
    return found[0]


def main() -> int:
    source = Path(__file__).resolve().parents[1]
    if Path(acp_otel.__file__).resolve().is_relative_to(source):
        raise SystemExit(f"acp_otel was imported from the source tree ({acp_otel.__file__}), not the wheel")
    client = Path(acp_otel._demo.examples.__file__).with_name("client.py")
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONPATH"}
    with OtlpReceiver() as receiver:
        env.update(receiver.exporter_env())
        env.update(
            {
                "OTEL_SERVICE_NAME": CLIENT_SERVICE,
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
        )
        done = subprocess.run(
            [str(instrument), sys.executable, str(client)], env=env, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0 or "[stop] end_turn" not in done.stdout:
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
            raise SystemExit(f"the traced client failed (exit status {done.returncode})")

        def both_prompts(spans: list[ReceivedSpan]) -> bool:
            names = {(_method(s), s.kind, s.service_name) for s in spans}
            return {("session/prompt", "CLIENT", CLIENT_SERVICE), ("session/prompt", "SERVER", AGENT_SERVICE)} <= names

        spans = receiver.wait_for(both_prompts, timeout=15)
    client_prompt = _one(spans, "session/prompt", "CLIENT", CLIENT_SERVICE)
    agent_prompt = _one(spans, "session/prompt", "SERVER", AGENT_SERVICE)
    if agent_prompt.parent_span_id != client_prompt.span_id:
        raise SystemExit("the agent's session/prompt span is not the child of the client's")
    services = sorted({s.service_name for s in spans})
    print(
        f"zero-code turn: {len(spans)} spans from {', '.join(services)}; agent session/prompt is the child of "
        f"the client's (trace {client_prompt.trace_id}); acp_otel from {Path(acp_otel.__file__).parent}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
