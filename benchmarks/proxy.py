"""Latency ``acp-otel proxy`` adds per round trip, and what it adds to an agent's start-up.

Usage::

    .venv/bin/python benchmarks/proxy.py            # full run (about a minute)
    .venv/bin/python benchmarks/proxy.py --smoke    # short CI run

An "editor" (this process) sends a JSON-RPC request and waits for the answer of an echo agent (a
small process that answers every request at once), over real pipes. Four connections are open at the
same time and measured interleaved, in a rotating order, round after round:

* ``direct``       editor -> agent;
* ``plain-relay``  editor -> a process that only copies lines (readline, write) -> agent;
* ``proxy-off``    editor -> ``acp-otel proxy`` with tracing off (``OTEL_TRACES_EXPORTER=none``) -> agent;
* ``proxy-traced`` editor -> ``acp-otel proxy`` exporting OTLP/HTTP to a receiver on loopback -> agent.

Each request carries an ``_meta`` object, as a traced editor's would. Start-up: time from starting
the command to the answer of the first request, direct vs through the traced proxy, interleaved.
Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import IO, Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ECHO = [sys.executable, os.path.abspath(__file__), "--echo-agent"]
PLAIN = [sys.executable, os.path.abspath(__file__), "--plain-relay", "--"]
PROXY = [sys.executable, "-m", "acp_otel.cli", "proxy", "--"]

REQUEST = (
    '{{"jsonrpc":"2.0","id":{id},"method":"session/prompt","params":{{"sessionId":"sess-1",'
    '"prompt":[{{"type":"text","text":"benchmark prompt"}}],'
    '"_meta":{{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}}}}\n'
)


# --------------------------------------------------------------------------- helper processes


def echo_agent() -> None:
    """Answer every request line at once (notifications and anything else are ignored)."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and "id" in message and "method" in message:
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"stopReason": "end_turn"}}
            out.write(json.dumps(answer).encode() + b"\n")
            out.flush()


def plain_relay(command: list[str]) -> None:
    """The least a relay can do: copy lines both ways, nothing parsed."""
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    def copy(src: IO[bytes], dst: IO[bytes], close: bool) -> None:
        for line in iter(src.readline, b""):
            dst.write(line)
            dst.flush()
        if close:
            dst.close()

    threading.Thread(target=copy, args=(sys.stdin.buffer, proc.stdin, True), daemon=True).start()
    copy(proc.stdout, sys.stdout.buffer, False)
    sys.exit(proc.wait())


# ----------------------------------------------------------------------------------- measuring


class Connection:
    """One editor-side connection to a command, sending requests and timing their answers."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.samples: list[float] = []
        self._next = 0

    def round_trip(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._next += 1
        line = REQUEST.format(id=self._next).encode()
        t0 = time.perf_counter()
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        elapsed = time.perf_counter() - t0
        if not answer:
            raise RuntimeError(f"{self.name}: connection ended")
        return elapsed

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.3f}"


def measure_round_trips(rounds: int, per_round: int, sink_env: dict[str, str]) -> dict[str, list[float]]:
    connections = [
        Connection("direct", ECHO, _env()),
        Connection("plain-relay", [*PLAIN, *ECHO], _env()),
        Connection("proxy-off", [*PROXY, *ECHO], _env(OTEL_TRACES_EXPORTER="none")),
        Connection("proxy-traced", [*PROXY, *ECHO], _env(**sink_env)),
    ]
    try:
        for conn in connections:  # warm up: imports done, first spans exported
            for _ in range(20):
                conn.round_trip()
        for r in range(rounds):
            order = connections[r % len(connections) :] + connections[: r % len(connections)]
            for conn in order:
                batch = [conn.round_trip() for _ in range(per_round)]
                conn.samples.append(statistics.median(batch))
    finally:
        for conn in connections:
            conn.close()
    return {conn.name: conn.samples for conn in connections}


def measure_start_up(repeats: int, sink_env: dict[str, str]) -> dict[str, list[float]]:
    variants = {"direct": (ECHO, _env()), "proxy-traced": ([*PROXY, *ECHO], _env(**sink_env))}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, (command, env) in variants.items():
            t0 = time.perf_counter()
            conn = Connection(name, command, env)
            conn.round_trip()
            results[name].append(time.perf_counter() - t0)
            conn.close()
    return results


def report(trips: dict[str, list[float]], start: dict[str, list[float]], per_round: int) -> None:
    rounds = len(trips["direct"])
    print(f"round trip (median of {per_round} per round, {rounds} rounds interleaved), milliseconds")
    print(f"{'variant':<14} {'median':>8} {'min':>8} {'max':>8} {'added vs direct':>16}")
    direct = statistics.median(trips["direct"])
    added: dict[str, float] = {}
    for name, samples in trips.items():
        median = statistics.median(samples)
        added[name] = median - direct
        extra = "" if name == "direct" else _ms(added[name])
        print(f"{name:<14} {_ms(median)} {_ms(min(samples))} {_ms(max(samples))} {extra:>16}")
    plain = added["plain-relay"]
    if plain > 0:
        for name in ("proxy-off", "proxy-traced"):
            print(f"{name} adds {added[name] / plain:.2f}x what the plain relay adds")
    print("start-up (spawn to first answer), milliseconds")
    for name, samples in start.items():
        print(f"{name:<14} {_ms(statistics.median(samples))} (median of {len(samples)})")
    print(
        f"the traced proxy adds {_ms(statistics.median(start['proxy-traced']) - statistics.median(start['direct']))}"
        " ms to the start-up"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="short run for CI")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--echo-agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plain-relay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_agent:
        echo_agent()
        return
    if args.plain_relay:
        plain_relay(args.command[1:] if args.command[:1] == ["--"] else args.command)
        return
    # The demo's loopback OTLP/HTTP receiver (the benchmarks import nothing from tests/).
    from acp_otel._demo.receiver import OtlpReceiver

    rounds = args.rounds if args.rounds is not None else (3 if args.smoke else 30)
    with OtlpReceiver() as sink:
        sink_env: dict[str, Any] = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.http_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        trips = measure_round_trips(rounds, args.per_round if not args.smoke else 20, sink_env)
        start = measure_start_up(3 if args.smoke else 10, sink_env)
        report(trips, start, args.per_round if not args.smoke else 20)
        print(f"spans received by the loopback OTLP receiver: {len(sink.spans())}")


if __name__ == "__main__":
    main()
