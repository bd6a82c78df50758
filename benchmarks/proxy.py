"""Latency ``acp-otel proxy`` adds per round trip, and what it adds to an agent's start-up.

Usage::

    .venv/bin/python benchmarks/proxy.py            # full run (a few minutes with the real agents)
    .venv/bin/python benchmarks/proxy.py --smoke    # short CI run (the example agent only)

Round trip: an "editor" (this process) sends a JSON-RPC request and waits for the answer of an echo agent (a
small process that answers every request at once), over real pipes. Four connections are open at the
same time and measured interleaved, in a rotating order, round after round:

* ``direct``       editor -> agent;
* ``plain-relay``  editor -> a process that only copies bytes both ways -> agent;
* ``proxy-off``    editor -> ``acp-otel proxy`` with its telemetry off (``OTEL_TRACES_EXPORTER=none``,
  ``OTEL_METRICS_EXPORTER=none``) -> agent;
* ``proxy-traced`` editor -> ``acp-otel proxy`` exporting OTLP/HTTP to a receiver on loopback -> agent;
* ``proxy-agent-tel`` the same with ``--agent-telemetry`` (the agent's own telemetry received, joined, forwarded;
  the echo agent exports none, so this is the option's cost on the relay and the turns).

Each request carries an ``_meta`` object, as a traced editor's would.

Start-up, as an editor sees it: from starting the command to the answer of its ``initialize``, for the example
agent and for each real agent installed (Qwen Code and Claude Code's adapter from ``tests/real_agents``, after
``npm install --no-save`` there; Gemini CLI when ``@google/gemini-cli`` is installed there or ``gemini`` is on
``PATH``), each started offline (private ``HOME``, model endpoints on a closed loopback port: ``initialize``
needs no model). Four ways, interleaved in a rotating order, round after round: ``direct``,
``plain-relay`` (``_plain_relay.py``: spawns the agent first thing, then copies bytes both ways), ``proxy``
(traced, exporting to the loopback receiver; the same ``OTEL_*`` environment reaches all of them) and
``proxy-agent-tel`` (the proxy with ``--agent-telemetry``). After each
start the agent's process group is killed. Medians are printed with the bound the proxy is held to: at most
twice what the plain relay adds, or 30 ms, whichever is larger. Then the CPU time the relay process (plain
relay or proxy, all its threads) has used when the editor's ``initialize`` reaches the agent, read by the agent
itself (a small agent that reads its parent's ``/proc/PID/task/*/schedstat`` on ``initialize`` and answers at
once; Linux only), interleaved, medians: unlike the wall-clock times, it hardly moves with the machine's load.
The package is byte-compiled first, as an installed one is (with ``PYTHONDONTWRITEBYTECODE`` set, a checkout
would compile its modules on every start). The load average is printed with the figures. Nothing is asserted.

Then, for Gemini CLI, Qwen Code and OpenCode where installed (``tests/real_agents``), ``--agent-telemetry`` off
against on: one scripted turn per run, the two alternating, ``--agent-turn-rounds`` rounds (3; not in smoke runs):
start-up to the ``initialize`` answer, the turn's round trip, shutdown after the editor closes stdin, the agent's
and the proxy's CPU, the spans the backend received (``_agent_turns.py``). ``--agent-turns-only`` runs just that.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _agent_turns  # noqa: E402  (beside this file)

ECHO = [sys.executable, os.path.abspath(__file__), "--echo-agent"]
CPU_AGENT = [sys.executable, os.path.abspath(__file__), "--cpu-agent"]
PLAIN = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_plain_relay.py"), "--"]
PROXY = [sys.executable, "-m", "acp_otel.cli", "proxy", "--"]
# As editors start it: the console script (what it imports is what an editor pays), when installed.
_SCRIPT = os.path.join(os.path.dirname(sys.executable), "acp-otel")
PROXY_START = [_SCRIPT, "proxy", "--"] if os.path.exists(_SCRIPT) else PROXY

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


def cpu_agent() -> None:
    """Answer ``initialize`` with the CPU nanoseconds the parent process (the relay) has used so far."""
    line = sys.stdin.buffer.readline()
    message = json.loads(line)
    cpu = _cpu_s(os.getppid())
    answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1, "relayCpuSeconds": cpu}}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    sys.stdin.read()


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
        Connection("proxy-off", [*PROXY, *ECHO], _env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")),
        Connection("proxy-traced", [*PROXY, *ECHO], _env(**sink_env)),
        Connection("proxy-agent-tel", [*PROXY[:-1], "--agent-telemetry", "--", *ECHO], _env(**sink_env)),
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


INITIALIZE = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
    b'"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}\n'
)
REAL_AGENTS = REPO + "/tests/real_agents/node_modules"
START_VARIANTS = ("direct", "plain-relay", "proxy", "proxy-agent-tel")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_up_agents(home: Path, smoke: bool) -> list[tuple[str, list[str], dict[str, str]]]:
    """The agents to start: the example agent, and the real ones that are installed (none in smoke mode)."""
    agents = [("example", [sys.executable, os.path.join(REPO, "examples", "agent.py")], {})]
    node = shutil.which("node")
    if smoke or node is None:
        return agents
    dead = f"http://127.0.0.1:{_closed_port()}"  # initialize needs no model: any call would fail at once
    private = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache")}
    qwen = Path(REAL_AGENTS, "@qwen-code", "qwen-code", "cli-entry.js")
    if qwen.exists():
        (home / ".qwen").mkdir(parents=True, exist_ok=True)
        settings = {
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": "scripted-model"},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False},
        }
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
        env = {**private, "OPENAI_API_KEY": "dummy", "OPENAI_BASE_URL": f"{dead}/v1", "OPENAI_MODEL": "scripted-model"}
        agents.append(("qwen-code", [node, str(qwen), "--acp"], {**env, "QWEN_CODE_DISABLE_PRECONNECT": "1"}))
    claude = Path(REAL_AGENTS, "@zed-industries", "claude-agent-acp", "dist", "index.js")
    if claude.exists():
        env = {**private, "ANTHROPIC_BASE_URL": dead, "ANTHROPIC_API_KEY": "dummy", "DISABLE_TELEMETRY": "1"}
        env.update(DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        agents.append(("claude-agent-acp", [node, str(claude)], env))
    gemini_js = Path(REAL_AGENTS, "@google", "gemini-cli", "bundle", "gemini.js")
    gemini = (
        [node, str(gemini_js)]
        if gemini_js.exists()
        else ([shutil.which("gemini") or ""] if shutil.which("gemini") else [])
    )
    if gemini:
        (home / ".gemini").mkdir(parents=True, exist_ok=True)
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
        }
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        env = {**private, "GEMINI_API_KEY": "dummy", "GOOGLE_GEMINI_BASE_URL": dead, "GEMINI_CLI_NO_RELAUNCH": "true"}
        agents.append(("gemini-cli", [*gemini, "--acp"], env))
    return agents


def _cpu_s(pid: int) -> float | None:
    """CPU seconds the live threads of ``pid`` have used (``None`` where ``/proc`` does not tell)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def _start_once(command: list[str], env: dict[str, str]) -> float:
    """Seconds from starting ``command`` to the answer of its ``initialize``; the process group is then killed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{command}: ended before answering initialize")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == 0 and "method" not in message:
                elapsed = time.perf_counter() - t0
                if "error" in message:
                    raise RuntimeError(f"{command}: initialize failed: {message['error']}")
                return elapsed
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def measure_start_up(rounds: int, sink_env: dict[str, str], smoke: bool) -> dict[str, dict[str, list[float]]]:
    import compileall

    compileall.compile_dir(os.path.join(REPO, "acp_otel"), quiet=1, force=True)  # force: a pyc of the same second
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        agents = start_up_agents(Path(tmp), smoke)
        for r in range(rounds + 1):  # the first round warms the caches and is not counted
            for name, command, agent_env in agents:
                env = {**_env(**sink_env), **agent_env}
                variants = {
                    "direct": command,
                    "plain-relay": [*PLAIN, *command],
                    "proxy": [*PROXY_START, *command],
                    "proxy-agent-tel": [*PROXY_START[:-1], "--agent-telemetry", "--", *command],
                }
                turn = r % len(START_VARIANTS)
                order = START_VARIANTS[turn:] + START_VARIANTS[:turn]
                for variant in order:
                    try:
                        elapsed = _start_once(variants[variant], env)
                    except RuntimeError as exc:
                        print(f"start-up of {name} ({variant}) failed: {exc}", file=sys.stderr)
                        continue
                    if r:
                        results.setdefault(name, {v: [] for v in START_VARIANTS})[variant].append(elapsed)
    return results


def report_trips(trips: dict[str, list[float]], per_round: int) -> None:
    rounds = len(trips["direct"])
    print(f"round trip (median of {per_round} per round, {rounds} rounds interleaved), milliseconds")
    print(f"{'variant':<15} {'median':>8} {'min':>8} {'max':>8} {'added vs direct':>16}")
    direct = statistics.median(trips["direct"])
    added: dict[str, float] = {}
    for name, samples in trips.items():
        median = statistics.median(samples)
        added[name] = median - direct
        extra = "" if name == "direct" else _ms(added[name])
        print(f"{name:<15} {_ms(median)} {_ms(min(samples))} {_ms(max(samples))} {extra:>16}")
    plain = added["plain-relay"]
    if plain > 0:
        for name in ("proxy-off", "proxy-traced", "proxy-agent-tel"):
            print(f"{name} adds {added[name] / plain:.2f}x what the plain relay adds")
    traced = statistics.median(trips["proxy-traced"])
    with_option = statistics.median(trips["proxy-agent-tel"])
    print(
        f"--agent-telemetry: round trip {100 * (with_option - traced) / traced:+.1f} % over proxy-traced (bound +10 %)"
    )


def measure_relay_cpu(rounds: int, sink_env: dict[str, str]) -> dict[str, list[float]]:
    """CPU seconds of the plain relay and of the proxy when ``initialize`` reaches :func:`cpu_agent`."""
    env = _env(**sink_env)
    variants = {"plain-relay": [*PLAIN, *CPU_AGENT], "proxy": [*PROXY_START, *CPU_AGENT]}
    results: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds + 1):
        for name in sorted(variants, reverse=bool(r % 2)):
            proc = subprocess.Popen(variants[name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(INITIALIZE)
            proc.stdin.flush()
            cpu = json.loads(proc.stdout.readline())["result"]["relayCpuSeconds"]
            proc.stdin.close()
            proc.wait(30)
            if r and cpu is not None:
                results[name].append(cpu)
    return results


def report_start(start: dict[str, dict[str, list[float]]], cpu: dict[str, list[float]]) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"start-up: spawn to the initialize answer, milliseconds (medians of interleaved rounds; load {load})")
    print(f"{'agent':<18} {'direct':>9} {'plain':>9} {'proxy':>9} {'plain adds':>11} {'proxy adds':>11} {'bound':>9}")
    for agent, samples in start.items():
        if not all(samples.values()):
            continue
        medians = {v: statistics.median(s) for v, s in samples.items()}
        plain_adds = medians["plain-relay"] - medians["direct"]
        proxy_adds = medians["proxy"] - medians["direct"]
        bound = max(2 * plain_adds, 0.030)
        verdict = "within" if proxy_adds <= bound else "OVER"
        print(
            f"{agent:<18} {_ms(medians['direct']):>9} {_ms(medians['plain-relay']):>9} {_ms(medians['proxy']):>9} "
            f"{_ms(plain_adds):>11} {_ms(proxy_adds):>11} {_ms(bound):>9} {verdict} "
            f"(n={len(samples['direct'])})"
        )
        option_adds = medians["proxy-agent-tel"] - medians["proxy"]
        verdict = "within" if option_adds <= 0.020 else "OVER"
        print(f"{'':<18} --agent-telemetry adds {_ms(option_adds)} ms to the proxy's start-up (bound 20 ms) {verdict}")
    if all(cpu.values()):
        print(
            "CPU time of the relay process when initialize reaches the agent, milliseconds (medians of "
            f"{len(cpu['proxy'])}): plain relay {_ms(statistics.median(cpu['plain-relay']))}, "
            f"proxy {_ms(statistics.median(cpu['proxy']))}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="short run for CI")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--start-rounds", type=int, help="start-up rounds (default 2 with --smoke, else 15)")
    parser.add_argument("--start-up-only", action="store_true", help="skip the round trips")
    parser.add_argument(
        "--agent-turn-rounds", type=int, help="rounds of real-agent turns, option off and on (default 3; 0 skips)"
    )
    parser.add_argument("--agent-turns-only", action="store_true", help="only the real agents' turns, off and on")
    parser.add_argument("--echo-agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu-agent", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_agent:
        echo_agent()
        return
    if args.cpu_agent:
        cpu_agent()
        return
    # The demo's loopback OTLP/HTTP receiver (the benchmarks import nothing from tests/).
    from acp_otel._demo.receiver import OtlpReceiver

    agent_rounds = 0 if args.smoke else (args.agent_turn_rounds if args.agent_turn_rounds is not None else 3)
    if args.agent_turns_only:
        _agent_turns.report(_agent_turns.measure(agent_rounds or 3, _agent_turns.installed()))
        return
    rounds = args.rounds if args.rounds is not None else (3 if args.smoke else 30)
    start_rounds = args.start_rounds if args.start_rounds is not None else (2 if args.smoke else 15)
    with OtlpReceiver() as sink:
        sink_env: dict[str, Any] = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.http_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        per_round = args.per_round if not args.smoke else 20
        trips = {} if args.start_up_only else measure_round_trips(rounds, per_round, sink_env)
        start = measure_start_up(start_rounds, sink_env, args.smoke)
        cpu = measure_relay_cpu(start_rounds, sink_env)
        if trips:
            report_trips(trips, per_round)
            print(f"spans received by the loopback OTLP receiver: {len(sink.spans())}")
        report_start(start, cpu)
    names = _agent_turns.installed() if agent_rounds else []
    if names:
        _agent_turns.report(_agent_turns.measure(agent_rounds, names))


if __name__ == "__main__":
    main()
