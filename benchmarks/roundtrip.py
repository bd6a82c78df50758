"""Cost of one ACP prompt round trip (K session/update notifications), bare vs traced.

Usage::

    .venv/bin/python benchmarks/roundtrip.py            # full run (a few minutes)
    .venv/bin/python benchmarks/roundtrip.py --smoke    # short CI run (< 60 s)

Client and agent run on the real SDK in one process, connected by a loopback TCP socket (real NDJSON
bytes). Every variant runs in its own subprocess, so that "no tracer provider" really means none;
the subprocesses are interleaved (the order rotates every round) and repeated, and the report gives
medians over rounds with their spread. Variants:

* ``bare``       no OpenTelemetry SDK tracer provider, not instrumented;
* ``sdk``        a global tracer provider (BatchSpanProcessor, discarding exporter), not instrumented:
                 only the SDK's own ``acp.request`` / ``acp.notification`` spans;
* ``instr``      instrumented, same provider (``notification_spans=all``, the default);
* ``unsampled``  instrumented, sampler ``ParentBased(ALWAYS_OFF)``;
* ``otlp``       instrumented, BatchSpanProcessor + OTLP/HTTP exporter to a receiver on loopback
                 (running in the parent process);
* ``instr-none`` / ``instr-events``  instrumented with ``notification_spans=none`` / ``events``;
* ``floor``      measured inside the ``instr`` subprocess with the same provider: starting and ending as
                 many bare spans as a traced turn creates, plus one inject and one extract per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

VARIANTS = ("bare", "sdk", "instr", "unsampled", "otlp", "instr-none", "instr-events")
MODES = {"instr": "all", "unsampled": "all", "otlp": "all", "instr-none": "none", "instr-events": "events"}


# ------------------------------------------------------------------------------------------ worker


def _setup(variant: str, otlp_endpoint: str | None) -> Any:
    """Configure OpenTelemetry for ``variant``; return the discarding exporter (or ``None``)."""
    if variant == "bare":
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    class DiscardExporter(SpanExporter):
        def __init__(self) -> None:
            self.count = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.count += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    sampler = ParentBased(ALWAYS_OFF) if variant == "unsampled" else None
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    exporter: Any = DiscardExporter()
    if variant == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
        exporter = None
    else:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    # The SDK's acp.telemetry.TRACER is a ProxyTracer that follows the global provider.
    trace.set_tracer_provider(provider)
    if variant in MODES:
        from acp_otel import AcpInstrumentor

        AcpInstrumentor().instrument(tracer_provider=provider, notification_spans=MODES[variant])
    return provider, exporter


# What a traced session/update span carries under the span contract (for the informational floor).
CONTRACT_ATTRIBUTES = {
    "rpc.system.name": "jsonrpc",
    "acp.method.name": "session/update",
    "acp.session.id": "sess-1",
    "gen_ai.conversation.id": "sess-1",
    "acp.client.name": "bench-client",
    "acp.client.version": "1.0.0",
    "acp.agent.name": "bench-agent",
    "acp.agent.version": "1.0.0",
}


def _floor_op(n_spans: int, n_msgs: int, attributes: dict[str, Any] | None = None) -> Any:
    """One turn's worth of the unavoidable work: bare spans plus one inject + extract per message.

    With ``attributes`` the spans carry the span contract's attributes: not the issue's floor, but it
    shows how much of the overhead is the contract's attributes rather than our code.
    """
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context

    tracer = trace.get_tracer("acp_otel.floor")
    inject, extract = propagate.inject, propagate.extract
    set_span = trace.set_span_in_context

    def op() -> None:
        for i in range(n_spans):
            span = tracer.start_span("floor", attributes=attributes)
            if i < n_msgs:
                carrier: dict[str, str] = {}
                inject(carrier, context=set_span(span))
                extract(carrier, context=Context())
            span.end()

    return op


def _time_floor(op: Any, n: int, provider: Any) -> float:
    """µs per turn of the floor ``op``: the best of three runs, each starting with an empty span queue.

    The floor is the unavoidable cost, so the fastest run measures it best; a single run sometimes pays
    for the batch processor's export thread waking up in the middle of it.
    """
    best = float("inf")
    for _ in range(3):
        provider.force_flush()
        t0 = time.perf_counter()
        for _ in range(n):
            op()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    from _bench_app import BenchPair

    setup = _setup(args.worker, args.otlp_endpoint)
    provider, exporter = setup if setup is not None else (None, None)
    ks = [int(k) for k in args.ks.split(",")]
    turns = {1: args.turns, **{k: max(5, args.turns * 4 // (k + 1)) for k in ks if k != 1}}
    pair = await BenchPair().start()
    try:
        for k in ks:  # warm-up
            for _ in range(max(10, turns[k] // 2)):
                await pair.prompt(f"k={k}")
        spans_per_turn: dict[int, float] = {}
        if exporter is not None:
            for k in ks:
                provider.force_flush()
                before = exporter.count
                for _ in range(20):
                    await pair.prompt(f"k={k}")
                provider.force_flush()
                spans_per_turn[k] = (exporter.count - before) / 20
        floor_ops: dict[int, Any] = {}
        attr_floor_ops: dict[int, Any] = {}
        if args.worker == "instr":
            for k in ks:
                floor_ops[k] = _floor_op(round(spans_per_turn[k]), 1 + k)  # request + K notifications
                attr_floor_ops[k] = _floor_op(round(spans_per_turn[k]), 1 + k, CONTRACT_ATTRIBUTES)
        elif args.worker == "unsampled":
            # The same spans as the sampled run would create, but through this worker's unsampled provider.
            for k in ks:
                floor_ops[k] = _floor_op(2 * (1 + k), 1 + k)
        times: dict[int, list[float]] = {k: [] for k in ks}
        floors: dict[int, list[float]] = {k: [] for k in ks}
        attr_floors: dict[int, list[float]] = {k: [] for k in ks}
        for b in range(args.batches):
            for k in ks if b % 2 == 0 else reversed(ks):
                n = turns[k]
                text = f"k={k}"
                # Every timed section starts with an empty span queue, so none pays for another's export.
                if provider is not None:
                    provider.force_flush()
                t0 = time.perf_counter()
                for _ in range(n):
                    await pair.prompt(text)
                times[k].append((time.perf_counter() - t0) / n * 1e6)
                if k in floor_ops:
                    floors[k].append(_time_floor(floor_ops[k], n, provider))
                if k in attr_floor_ops:
                    attr_floors[k].append(_time_floor(attr_floor_ops[k], n, provider))
    finally:
        await pair.close()
        if provider is not None:
            provider.shutdown()
    return {
        "variant": args.worker,
        "us": {k: statistics.median(v) for k, v in times.items()},
        "floor_us": {k: statistics.median(v) for k, v in floors.items() if v},
        "attr_floor_us": {k: statistics.median(v) for k, v in attr_floors.items() if v},
        "spans_per_turn": spans_per_turn,
    }


async def _throughput_worker(args: argparse.Namespace) -> dict[str, Any]:
    from _bench_app import BenchPair

    setup = _setup(args.worker, None)
    provider = setup[0] if setup is not None else None
    pairs = [await BenchPair().start() for _ in range(args.sessions)]
    text = f"k={args.throughput_k}"
    count = 0
    stop = 0.0

    async def run(pair: BenchPair) -> None:
        nonlocal count
        while time.perf_counter() < stop:
            await pair.prompt(text)
            count += 1

    try:
        stop = time.perf_counter() + min(1.0, args.duration / 3)  # warm-up
        await asyncio.gather(*(run(p) for p in pairs))
        count = 0
        t0 = time.perf_counter()
        stop = t0 + args.duration
        await asyncio.gather(*(run(p) for p in pairs))
        elapsed = time.perf_counter() - t0
    finally:
        for p in pairs:
            await p.close()
        if provider is not None:
            provider.shutdown()
    return {"variant": args.worker, "turns_per_s": count / elapsed}


# ------------------------------------------------------------------------------------------ parent


def _run_worker(argv: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    for name in list(env):  # a stray OTEL_* setting must not change a variant
        if name.startswith("OTEL_"):
            del env[name]
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv], capture_output=True, text=True, env=env, timeout=600
    )
    if out.returncode != 0:
        raise RuntimeError(f"worker {argv} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


RECEIVER_KIND = "acp_otel.demo.receiver.OtlpReceiver (HTTP, counting)"


def _counting_receiver() -> Any:
    """The embedded OTLP/HTTP receiver, decoding requests but keeping only a span count.

    A long run exports millions of spans; storing them would grow the parent process for nothing.
    """
    from acp_otel.demo.receiver import OtlpReceiver

    class CountingReceiver(OtlpReceiver):
        received = 0

        def _ingest(self, resource_spans: Any, transport: str) -> None:
            count = sum(len(ss.spans) for rs in resource_spans for ss in rs.scope_spans)
            with self._cond:
                self.received += count

    return CountingReceiver(enable_grpc=False)


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    q = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q[0]:.0f}–{q[2]:.0f}"


def _parent(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    receiver = _counting_receiver().start()
    endpoint = receiver.http_traces_url
    ks = [int(k) for k in args.ks.split(",")]
    results: dict[str, dict[int, list[float]]] = {v: {k: [] for k in ks} for v in VARIANTS}
    floors: dict[int, list[float]] = {k: [] for k in ks}
    attr_floors: dict[int, list[float]] = {k: [] for k in ks}
    unsampled_floors: dict[int, list[float]] = {k: [] for k in ks}
    spans: dict[str, dict[int, float]] = {}
    common = ["--ks", args.ks, "--turns", str(args.turns), "--batches", str(args.batches)]
    print(f"machine: nproc={os.cpu_count()}, cpu={_cpu_model()}, python={sys.version.split()[0]}")
    print(
        f"rounds={args.rounds} batches/worker={args.batches} turns/batch(K=1)={args.turns}; receiver: {RECEIVER_KIND}"
    )
    try:
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for variant in order:
                res = _run_worker(["--worker", variant, "--otlp-endpoint", endpoint, *common])
                for k in ks:
                    results[variant][k].append(res["us"][str(k)])
                    if str(k) in res["floor_us"]:
                        target = unsampled_floors if variant == "unsampled" else floors
                        target[k].append(res["floor_us"][str(k)])
                    if str(k) in res["attr_floor_us"]:
                        attr_floors[k].append(res["attr_floor_us"][str(k)])
                if res["spans_per_turn"]:
                    spans[variant] = {int(k): v for k, v in res["spans_per_turn"].items()}
            print(f"  round {r + 1}/{args.rounds} done ({time.perf_counter() - started:.0f} s)", flush=True)
        throughput: dict[str, list[float]] = {"bare": [], "instr": []}
        for r in range(args.throughput_rounds):
            for variant in ("bare", "instr") if r % 2 == 0 else ("instr", "bare"):
                res = _run_worker(
                    [
                        "--throughput-worker",
                        "--worker",
                        variant,
                        "--sessions",
                        str(args.sessions),
                        "--duration",
                        str(args.duration),
                        "--throughput-k",
                        str(args.throughput_k),
                    ]
                )
                throughput[variant].append(res["turns_per_s"])
    finally:
        receiver.stop()

    med = {v: {k: statistics.median(results[v][k]) for k in ks} for v in VARIANTS}
    floor = {k: statistics.median(floors[k]) for k in ks}
    attr_floor = {k: statistics.median(attr_floors[k]) for k in ks}
    unsampled_floor = {k: statistics.median(unsampled_floors[k]) for k in ks}
    print()
    print("Per-turn time, µs: median over rounds (p25–p75 of the per-round medians)")
    header = "| variant | " + " | ".join(f"K={k} median | K={k} p25–p75" for k in ks) + " |"
    print(header)
    print("|" + "---|" * (1 + 2 * len(ks)))
    for v in VARIANTS:
        cells = " | ".join(f"{med[v][k]:.0f} | {_spread(results[v][k])}" for k in ks)
        print(f"| {v} | {cells} |")
    cells = " | ".join(f"{floor[k]:.0f} | {_spread(floors[k])}" for k in ks)
    print(f"| floor (6) | {cells} |")
    cells = " | ".join(f"{attr_floor[k]:.0f} | {_spread(attr_floors[k])}" for k in ks)
    print(f"| floor with the contract's attributes (info) | {cells} |")
    cells = " | ".join(f"{unsampled_floor[k]:.0f} | {_spread(unsampled_floors[k])}" for k in ks)
    print(f"| unsampled floor: unsampled spans + inject/extract (info) | {cells} |")
    print()
    print("Ratios (medians):")
    for k in ks:
        bare, instr, unsampled, otlp = med["bare"][k], med["instr"][k], med["unsampled"][k], med["otlp"][k]
        over = (instr - bare) / floor[k]
        uns = (unsampled - bare) / bare
        print(
            f"  K={k:<3} (instr-bare)/floor = {over:.2f} [target <= 1.25: {'met' if over <= 1.25 else 'MISSED'}]"
            f"   (unsampled-bare)/bare = {uns * 100:+.1f}% [target <= 5%: {'met' if uns <= 0.05 else 'MISSED'}]"
            f"   otlp/instr = {otlp / instr:.2f}   sdk/bare = {med['sdk'][k] / bare:.2f}"
            f"   instr-bare = {instr - bare:.0f} µs, floor = {floor[k]:.0f} µs"
        )
        print(
            f"         info: (instr-bare)/floor-with-attributes = {(instr - bare) / attr_floor[k]:.2f}"
            f"   unsampled floor/bare = {unsampled_floor[k] / bare * 100:.1f}%"
            f"   (unsampled-bare)/unsampled floor = {(unsampled - bare) / unsampled_floor[k]:.2f}"
        )
    print()
    kk = max(ks)
    print(f"notification_spans modes at K={kk} (spans per turn, overhead vs bare):")
    for v in ("instr", "instr-none", "instr-events"):
        n = spans.get(v, {}).get(kk, float("nan"))
        print(
            f"  {MODES[v]:<7} spans/turn = {n:5.1f}   overhead = {med[v][kk] - med['bare'][kk]:7.0f} µs"
            f" ({(med[v][kk] / med['bare'][kk] - 1) * 100:+.1f}%)"
        )
    print(f"  spans/turn by variant: {json.dumps({v: spans[v] for v in spans})}")
    if throughput["bare"]:
        tb, ti = statistics.median(throughput["bare"]), statistics.median(throughput["instr"])
        print()
        print(
            f"{args.sessions} concurrent sessions (one connection pair each), K={args.throughput_k}: "
            f"bare {tb:.0f} turns/s ({_spread(throughput['bare'])}), "
            f"instrumented {ti:.0f} turns/s ({_spread(throughput['instr'])}); instrumented/bare = {ti / tb:.2f}"
        )
    print(f"OTLP receiver counted {receiver.received} spans")
    print(f"wall time: {time.perf_counter() - started:.0f} s")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="short run for CI (< 60 s)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None, help="turns per timed batch at K=1")
    parser.add_argument("--ks", default="1,20")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--duration", type=float, default=None, help="seconds per throughput measurement")
    parser.add_argument("--throughput-rounds", type=int, default=None)
    parser.add_argument("--throughput-k", type=int, default=5)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--throughput-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--otlp-endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # (smoke, full) defaults for the options left unset; an explicit value, even 0, is kept.
    for name, smoke_default, full_default in (
        ("rounds", 2, 9),
        ("batches", 2, 5),
        ("turns", 60, 200),
        ("duration", 1.0, 3.0),
        ("throughput_rounds", 1, 5),
    ):
        if getattr(args, name) is None:
            setattr(args, name, smoke_default if args.smoke else full_default)
    if args.worker:
        result = asyncio.run(_throughput_worker(args) if args.throughput_worker else _worker(args))
        print(json.dumps(result))
        return
    _parent(args)


if __name__ == "__main__":
    main()
