"""Load on a remote agent: many HTTP connections, sessions and turns, traced against untraced.

Usage::

    .venv/bin/python benchmarks/remote_load.py             # 20 x 2 x 10 per round, to 10,000 traced turns
    .venv/bin/python benchmarks/remote_load.py --smoke     # a short run for CI (well under a minute of load)
    .venv/bin/python benchmarks/remote_load.py --transport ws --connections 10

Two agent servers run as processes (``tests/remote_peers/agent_server.py``: the SDK's ASGI app under uvicorn on
loopback), one instrumented with acp-otel (spans checked, then discarded), one not. This process is the editor
side: untraced SDK clients over Streamable HTTP (or WebSocket). A round opens N connections x S sessions and runs
T turns per session concurrently; every turn streams chunks, reports a tool call, asks a permission and calls
back into the client (``fs/read_text_file``, an extension request and notification), with the same tool call
id in every session. Rounds alternate between the two servers (the machine's speed drifts), and each server's
CPU time (``/proc/PID/stat``) and resident memory are read around every round.

Printed: turns/s and agent CPU per turn for both, the traced/untraced throughput ratio and CPU difference per
turn, and the traced agent's resident memory after warm-up and at its end (and at about ten points between).
``--icount`` (where valgrind is installed) instead counts the instructions each agent executes per turn
(cachegrind, difference of a short and a longer run of one connection), which do not drift with the machine.
Checked (exit status 1 when one fails): every turn answered ``end_turn``; on the traced agent, every span ended
and no trace holds spans of two sessions. Timings are reported against the targets, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from acp_app import TraceClient, initialize, prompt  # noqa: E402

AGENT = ROOT / "tests" / "remote_peers" / "agent_server.py"
TICKS = os.sysconf("SC_CLK_TCK")


class Server:
    """One agent server process."""

    def __init__(self, traced: bool, runner: tuple[str, ...] = ()) -> None:
        self.traced = traced
        args = [*runner, sys.executable, str(AGENT), "-"] + (["--traced"] if traced else [])
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONHASHSEED": "0"}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            raise SystemExit(f"agent server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.cpu = 0.0  # seconds of agent CPU spent in rounds
        self.wall = 0.0
        self.turns = 0
        self.rss: list[int] = []  # kB after each round

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=600)  # a server under valgrind takes its time
        for line in out.splitlines():
            if line.startswith("SUMMARY "):
                return dict(json.loads(line[len("SUMMARY ") :]))
        raise SystemExit("agent server gave no summary")


async def _connection(url: str, sessions: int, turns: int) -> list[str]:
    from acp import connect_to_agent

    if url.startswith("ws"):
        from acp.ws import create_websocket_stream

        transport = await create_websocket_stream(url)
    else:
        from acp.http import create_http_stream

        transport = create_http_stream(url)
    conn = connect_to_agent(TraceClient(), transport)
    try:
        await initialize(conn)
        ids = [(await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id for _ in range(sessions)]

        async def session(session_id: str) -> list[str]:
            return [(await prompt(conn, session_id, f"turn {i}")).stop_reason for i in range(turns)]

        results = await asyncio.gather(*(session(s) for s in ids))
        return [stop for stops in results for stop in stops]
    finally:
        await conn.close()


async def _round(server: Server, transport: str, connections: int, sessions: int, turns: int) -> list[str]:
    url = f"{'ws' if transport == 'ws' else 'http'}://127.0.0.1:{server.port}/acp"
    cpu, start = server.cpu_seconds(), time.perf_counter()
    results = await asyncio.gather(*(_connection(url, sessions, turns) for _ in range(connections)))
    server.wall += time.perf_counter() - start
    server.cpu += server.cpu_seconds() - cpu
    stops = [stop for stops in results for stop in stops]
    server.turns += len(stops)
    server.rss.append(server.rss_kb())
    return stops


def _icount(traced: bool, turns: int) -> int:
    """Instructions the agent server executes, start to stop, serving ``turns`` turns (cachegrind)."""
    out = Path(tempfile.mkdtemp(prefix="acp-otel-icount-")) / "cachegrind.out"
    valgrind = (
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        f"--cachegrind-out-file={out}",
        f"--log-file={out}.log",
    )
    server = Server(traced, valgrind)
    asyncio.run(_connection(f"http://127.0.0.1:{server.port}/acp", 2, turns // 2))
    server.stop()
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            shutil.rmtree(out.parent)
            return int(line.split()[1])
    raise SystemExit("cachegrind wrote no summary")


def icount_main(short: int, long: int) -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: no instruction counts")
        return 0
    per_turn = {}
    for traced in (False, True):
        per_turn[traced] = (_icount(traced, long) - _icount(traced, short)) / (long - short)
    extra = per_turn[True] - per_turn[False]
    print(
        f"agent instructions per turn (cachegrind, runs of {short} and {long} turns, one connection, 2 sessions): "
        f"untraced {per_turn[False] / 1e3:.0f}k, traced {per_turn[True] / 1e3:.0f}k, "
        f"difference {extra / 1e3:+.0f}k ({extra / per_turn[False]:+.1%})"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="short run for CI")
    parser.add_argument("--transport", choices=["http", "ws"], default="http")
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--turns", type=int, default=10, help="turns per session per round")
    parser.add_argument("--total", type=int, default=10_000, help="traced turns in all (memory over the run)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds per server before memory is compared")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this many seconds of load (0: none)")
    parser.add_argument("--progress", action="store_true", help="print each round's turns and RSS on stderr")
    parser.add_argument("--icount", action="store_true", help="count instructions per turn (valgrind) instead")
    args = parser.parse_args()
    if args.icount:
        return icount_main(20, 60)
    if args.smoke:
        args.connections, args.sessions, args.turns, args.total, args.warmup = 4, 2, 3, 400, 1
        args.seconds = args.seconds or 20
    per_round = args.connections * args.sessions * args.turns
    servers = [Server(traced=False), Server(traced=True)]
    untraced, traced = servers
    bad: list[str] = []
    started = time.perf_counter()
    try:
        rounds = 0
        while traced.turns < args.total:
            for server in servers if rounds % 2 == 0 else servers[::-1]:  # alternate who goes first
                stops = asyncio.run(_round(server, args.transport, args.connections, args.sessions, args.turns))
                if stops.count("end_turn") != per_round:
                    bad.append(f"{'traced' if server.traced else 'untraced'}: turns ended {sorted(set(stops))}")
            rounds += 1
            if args.progress:
                print(
                    f"round {rounds}: {traced.turns} traced turns, traced agent RSS {traced.rss[-1] / 1024:.1f} MB, "
                    f"{time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
            if args.seconds and time.perf_counter() - started > args.seconds and rounds > args.warmup:
                break
    finally:
        summaries = [server.stop() for server in servers]
    summary = summaries[1]
    if summary["open"]:
        bad.append(f"traced agent: {summary['open']} spans never ended")
    if summary["mixed_traces"]:
        bad.append(f"traced agent: {summary['mixed_traces']} traces hold spans of two sessions")
    if summary["spans"] < traced.turns:
        bad.append(f"traced agent: only {summary['spans']} spans for {traced.turns} turns")

    def rate(s: Server) -> float:
        return s.turns / s.wall

    def cpu_ms(s: Server) -> float:
        return 1000 * s.cpu / s.turns

    ratio = rate(traced) / rate(untraced)
    extra = cpu_ms(traced) - cpu_ms(untraced)
    warm = traced.rss[min(args.warmup, len(traced.rss)) - 1]
    growth = (traced.rss[-1] - warm) / 1024
    print(
        f"remote agent load ({args.transport}): {args.connections} connections x {args.sessions} sessions x "
        f"{args.turns} turns per round, {rounds} rounds per agent, {traced.turns} traced turns "
        f"({summary['spans']} spans, none left open, no trace across sessions: {not bad})"
    )
    print("| agent | turns/s | agent CPU per turn (ms) | RSS after warm-up → end (MB) |")
    print("|---|---|---|---|")
    for s in servers:
        w = s.rss[min(args.warmup, len(s.rss)) - 1]
        name = "traced" if s.traced else "untraced"
        print(f"| {name} | {rate(s):.1f} | {cpu_ms(s):.2f} | {w / 1024:.1f} → {s.rss[-1] / 1024:.1f} |")
    print(
        f"throughput traced/untraced: {ratio:.3f} (target ≥ 0.90: {'met' if ratio >= 0.9 else 'MISSED'}); "
        f"agent CPU per turn: {extra:+.2f} ms (target ≤ +1 ms: {'met' if extra <= 1 else 'MISSED'}); "
        f"traced agent memory after warm-up: {growth:+.1f} MB"
    )
    # The traced agent's memory over the run, at about ten points (rounds after warm-up).
    after = traced.rss[min(args.warmup, len(traced.rss)) - 1 :]
    step = max(1, len(after) // 10)
    points = after[::step] + ([after[-1]] if (len(after) - 1) % step else [])
    print("traced agent RSS over the run (MB, from warm-up): " + " ".join(f"{kb / 1024:.1f}" for kb in points))
    for line in bad:
        print(f"FAILED: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
