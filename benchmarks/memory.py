"""Leak check: many requests with mixed outcomes through an instrumented client/agent pair.

Usage::

    .venv/bin/python benchmarks/memory.py            # 100,000 requests
    .venv/bin/python benchmarks/memory.py --smoke    # 5,000 requests (CI, < 60 s)

The client and agent run on the real SDK in this process, over a loopback TCP socket. Requests are
``session/prompt`` turns spread over several concurrent sessions, cycling through: success (with one
``session/update``), JSON-RPC error response, handler exception (-32603), and caller cancellation (the
client cancels its request, then sends ``session/cancel``; the agent either answers ``cancelled`` or its
handler task is itself cancelled). Checks, exit status 1 when one fails:

* every span started was ended (a SpanProcessor counts both);
* no entry left in the engine's maps (no turn registered; after the connections are
  closed and collected, no per-connection state is left either);
* resident memory grows by less than 5 MB between the end of the warm-up and the end of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import time
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_app import BenchAgent, BenchPair, text_block  # noqa: E402
from _bench_app import text_of as _text_of  # noqa: E402

from acp_otel import AcpInstrumentor  # noqa: E402

LIMIT_MB = 5.0


class CountingProcessor(SpanProcessor):
    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started += 1

    def on_end(self, span: Any) -> None:
        self.ended += 1


class DiscardExporter(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class CancellableAgent(BenchAgent):
    """``slow`` prompts wait for ``session/cancel``; then answer ``cancelled`` or get cancelled themselves."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[str, asyncio.Future[str]] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.finished: dict[str, asyncio.Event] = {}

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        fut = self.waiting.pop(session_id, None)
        if fut is not None and not fut.done():
            fut.set_result("cancel")

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        text = _text_of(prompt)
        if not text.startswith("slow"):
            return await super().prompt(prompt, session_id, **kwargs)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[session_id] = fut
        self.started[session_id].set()
        try:
            await fut
            if text == "slow-raise-cancel":
                raise asyncio.CancelledError  # the handler task ends cancelled: no response is sent
            return {"stopReason": "cancelled"}
        finally:
            self.finished[session_id].set()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def one_request(pair: BenchPair, agent: CancellableAgent, session_id: str, i: int, tally: dict[str, int]) -> None:
    outcome = i % 4
    conn = pair.client_conn
    if outcome == 0:
        await conn.prompt(session_id=session_id, prompt=[text_block("k=1")])
        tally["success"] += 1
    elif outcome in (1, 2):
        try:
            await conn.prompt(session_id=session_id, prompt=[text_block("error" if outcome == 1 else "raise")])
        except Exception:
            tally["error" if outcome == 1 else "exception"] += 1
        else:
            raise AssertionError("expected an error response")
    else:
        started, finished = asyncio.Event(), asyncio.Event()
        agent.started[session_id], agent.finished[session_id] = started, finished
        text = "slow-raise-cancel" if (i // 4) % 2 else "slow"
        task = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block(text)]))
        await started.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            tally["cancelled"] += 1
        await conn.cancel(session_id=session_id)
        await finished.wait()


async def run(total: int, warmup: int, sessions: int) -> int:
    counter = CountingProcessor()
    provider = TracerProvider()
    provider.add_span_processor(counter)
    provider.add_span_processor(BatchSpanProcessor(DiscardExporter()))
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    engine = instrumentor._state.engine  # the instrumentor's state, to count what the engine still holds
    assert engine is not None
    agent = CancellableAgent()
    pair = BenchPair(agent)
    await pair.start()
    session_ids = [pair.session_id]
    for _ in range(sessions - 1):
        session_ids.append((await pair.client_conn.new_session(cwd="/tmp", mcp_servers=[])).session_id)
    tally = {"success": 0, "error": 0, "exception": 0, "cancelled": 0}
    next_i = 0
    baseline = 0.0
    t0 = time.perf_counter()

    async def worker(session_id: str) -> None:
        nonlocal next_i, baseline
        while next_i < total:
            i = next_i
            next_i += 1
            if i == warmup:
                gc.collect()
                baseline = rss_mb()
            await one_request(pair, agent, session_id, i, tally)

    await asyncio.gather(*(worker(s) for s in session_ids))
    elapsed = time.perf_counter() - t0
    gc.collect()
    end_rss = rss_mb()
    open_prompts = sum(len(state.turns) for state in list(engine._peers.values()))  # turns still registered
    provider.force_flush()
    started_before_close, ended_before_close = counter.started, counter.ended
    await pair.close()
    pair = agent = None  # drop the connections so that their per-connection state can go
    await asyncio.sleep(0.05)
    gc.collect()
    peers_left = len(engine._peers)
    provider.shutdown()
    instrumentor.uninstrument()

    growth = end_rss - baseline
    print(f"requests: {total} in {elapsed:.1f} s over {sessions} sessions; outcomes: {tally}")
    print(f"spans: started {started_before_close}, ended {ended_before_close} (after close: {counter.ended})")
    print(f"engine: open prompt entries {open_prompts}, per-connection entries after close+gc {peers_left}")
    print(
        f"RSS: {baseline:.1f} MB after warm-up ({warmup} requests) -> {end_rss:.1f} MB at the end: "
        f"growth {growth:+.2f} MB (limit {LIMIT_MB} MB)"
    )
    failures = []
    if started_before_close != ended_before_close or counter.started != counter.ended:
        failures.append("spans left open")
    if open_prompts:
        failures.append("prompt entries left in the engine")
    if peers_left:
        failures.append("per-connection state left in the engine")
    if growth >= LIMIT_MB:
        failures.append("resident memory grew too much")
    if sum(tally.values()) != total:
        failures.append("not every request completed with its expected outcome")
    print("RESULT:", "FAIL: " + "; ".join(failures) if failures else "OK")
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="5,000 requests (CI)")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--sessions", type=int, default=8)
    args = parser.parse_args()
    total = args.requests if args.requests is not None else (5_000 if args.smoke else 100_000)
    if total < 1:
        parser.error("--requests must be at least 1")
    # The baseline is taken when request number `warmup` starts: it must be part of the run.
    warmup = min(max(1000, total // 10), total // 2)
    # Handler exceptions are logged by the SDK at ERROR with a traceback: keep the output readable.
    logging.disable(logging.CRITICAL)
    sys.exit(asyncio.run(run(total, warmup, args.sessions)))


if __name__ == "__main__":
    main()
