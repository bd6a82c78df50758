"""``--agent-telemetry`` on against off, per real agent: one scripted turn at a time through ``acp-otel proxy``.

Used by ``benchmarks/proxy.py``. The agents, the scripted model, the editor stand-in and the OTLP receiver that
stands for the backend are the real-agent suite's (``tests/real_agents``: the agents from its
``package-lock.json``, installed there with ``npm install --no-save``). Per agent, round after round, the two
variants alternate in a rotating order, each a fresh agent (private ``HOME``) running one turn of the script (read a
file, write one, run a command, answer) behind a traced proxy, then the editor closing its stdin. Per run:

* ``initialize``: from the spawn of the proxy to the answer of the editor's ``initialize``;
* ``turn``: the ``session/prompt`` round trip (the agent's model calls against the scripted model included);
* ``shutdown``: from the editor closing the proxy's stdin to the proxy's exit (the agent's exit and every export);
* ``agent CPU`` / ``proxy CPU``: CPU seconds of the agent's processes (every process with the run's ``HOME`` but
  the proxy) and of the proxy, sampled from ``/proc`` every 0.2 s while the run lasts (the last sample per process);
* ``spans``: the spans the backend received from the agent's services (forwarded by the proxy), and in all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AGENTS = ("gemini", "qwen", "opencode")
VARIANTS = ("off", "on")
PROXY_SERVICE = "proxy"
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    initialize: float
    turn: float
    shutdown: float
    agent_cpu: float
    proxy_cpu: float
    agent_spans: int
    spans: int


@dataclass
class CpuSampler:
    """CPU seconds per process of one run (found by ``HOME=home`` in its environment), polled in a thread."""

    home: Path
    agent: dict[int, float] = field(default_factory=dict)
    proxy: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._marker = f"HOME={self.home}".encode()
        self._known: dict[int, bool] = {}  # pid -> is the proxy; pids of other runs are skipped once read
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def _sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if pid not in self._known:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        mine = self._marker in f.read().split(b"\0")
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        is_proxy = b"acp_otel.cli" in f.read()
                except OSError:
                    continue
                if not mine:
                    self._known[pid] = False
                    continue
                self._known[pid] = is_proxy
                (self.proxy if is_proxy else self.agent)[pid] = 0.0
            if pid in self.agent or pid in self.proxy:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rpartition(")")[2].split()
                except OSError:
                    continue
                seconds = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
                (self.proxy if self._known[pid] else self.agent)[pid] = seconds


def _imports() -> Any:
    for path in ("tests/real_agents", "tests/proxy_peers", "tests/support"):
        if str(REPO / path) not in sys.path:
            sys.path.insert(0, str(REPO / path))
    import agents
    import editor
    import model_server
    import sink

    return agents, editor, model_server, sink


def _agent(agents: Any, name: str, home: Path, model_url: str) -> Any:
    agent = getattr(agents, f"{name}_agent")(home, model_url)
    if name == "gemini":  # as in the suite's agent-telemetry cases: nothing of its own telemetry configured
        path = home / ".gemini" / "settings.json"
        settings = json.loads(path.read_text())
        settings.pop("telemetry", None)
        path.write_text(json.dumps(settings))
    return agent


def one_run(name: str, option: bool) -> Sample:
    agents, editor, model_server, sink_module = _imports()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = model_server.Script(root / "workspace", f"CANARY{uuid.uuid4().hex[:12]}")
        script.prepare()
        home = root / "home"
        home.mkdir()
        with model_server.ModelServer(script) as model, sink_module.Sink() as sink:
            agent = _agent(agents, name, home, model.url)
            env = {**agent.env, **sink.env(), "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"}
            args = ["--service-name", PROXY_SERVICE, *(["--agent-telemetry"] if option else [])]
            sampler = CpuSampler(home)
            sampler.start()
            try:
                run = asyncio.run(
                    editor.run_turn(
                        agent.command,
                        env,
                        script.workspace,
                        f"Read the file, write another and run a command. {script.canary}-PROMPT",
                        proxy_args=args,
                        before_prompt=model.begin_turn,
                        grace=agent.grace,
                        timeout=300,
                        tap=False,
                    )
                )
            finally:
                sampler.stop()
                agents.end_leftovers(home)
            if run.result is None or run.result.stop_reason != "end_turn":
                raise RuntimeError(f"{name}: the turn did not end: {run.stderr[-2000:]}")
            spans = sink.snapshot()
    return Sample(
        initialize=run.extra["initialize_seconds"],
        turn=run.extra["turn_seconds"][0],
        shutdown=run.shutdown_seconds,
        agent_cpu=sum(sampler.agent.values()),
        proxy_cpu=sum(sampler.proxy.values()),
        agent_spans=sum(1 for s in spans if s.service != PROXY_SERVICE),
        spans=len(spans),
    )


def installed() -> list[str]:
    """The agents of :data:`AGENTS` whose packages are installed under ``tests/real_agents/node_modules``."""
    modules = REPO / "tests" / "real_agents" / "node_modules"
    entries = {
        "gemini": modules / "@google" / "gemini-cli" / "bundle" / "gemini.js",
        "qwen": modules / "@qwen-code" / "qwen-code" / "cli-entry.js",
        "opencode": modules / "opencode-linux-x64" / "bin" / "opencode",
    }
    return [name for name in AGENTS if entries[name].exists()]


def measure(rounds: int, names: list[str]) -> dict[str, dict[str, list[Sample]]]:
    results: dict[str, dict[str, list[Sample]]] = {n: {v: [] for v in VARIANTS} for n in names}
    # The editor answers an agent's read of a file it has yet to write with an error, which the SDK logs: expected.
    logging.disable(logging.ERROR)
    for r in range(rounds):
        for name in names:
            order = VARIANTS[r % 2 :] + VARIANTS[: r % 2]
            for variant in order:
                try:
                    results[name][variant].append(one_run(name, variant == "on"))
                except Exception as exc:  # said, and the round goes on
                    print(f"{name} ({variant}): {exc}", file=sys.stderr)
    return results


def report(results: dict[str, dict[str, list[Sample]]]) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"--agent-telemetry off / on, one scripted turn per run, medians (load {load})")
    columns = (
        ("initialize ms", "initialize", 1000.0),
        ("turn ms", "turn", 1000.0),
        ("shutdown ms", "shutdown", 1000.0),
        ("agent CPU ms", "agent_cpu", 1000.0),
        ("proxy CPU ms", "proxy_cpu", 1000.0),
        ("agent spans", "agent_spans", 1.0),
        ("spans", "spans", 1.0),
    )
    print(f"{'agent':<10} {'n':>5} " + " ".join(f"{title:>22}" for title, _, _ in columns))
    for name, variants in results.items():
        off, on = variants["off"], variants["on"]
        if not off or not on:
            continue
        cells = []
        for _, key, scale in columns:
            a = statistics.median(getattr(s, key) for s in off) * scale
            b = statistics.median(getattr(s, key) for s in on) * scale
            ratio = f"{b / a:.2f}x" if a else "-"
            cells.append(f"{a:7.0f} / {b:7.0f} {ratio:>5}")
        print(f"{name:<10} {len(off)}/{len(on):<3} " + " ".join(f"{c:>22}" for c in cells))
