"""Our tracing overhead against the in-situ floor: the cheapest tracing possible at the same SDK hooks.

Usage::

    .venv/bin/python benchmarks/roundtrip.py            # full run (a few minutes)
    .venv/bin/python benchmarks/roundtrip.py --smoke    # short CI run (well under two minutes)
    .venv/bin/python benchmarks/roundtrip.py --modes all,none --ks 1,20 --no-valgrind

One prompt round trip carries K ``session/update`` notifications (agent to client). Client and agent run
on the real SDK in one process over a loopback TCP socket (real NDJSON bytes). Three variants:

* ``bare``   the SDK with its own spans off (``acp.telemetry.TRACER = None``), not instrumented;
* ``instr``  ``AcpInstrumentor`` with the defaults, ``notification_spans`` = the mode under test;
* ``floor``  plain functions (no wrapt) replacing the SDK's four hooks ``send_request``,
  ``send_notification``, ``_execute_request`` (``_run_request`` before 0.12.1) and ``_run_notification``,
  doing the minimum any tracing there must do: per send a span (start + end, 2 attributes) and one
  ``propagate.inject`` into ``params._meta`` (in place: no copy), per receive one ``propagate.extract``
  and a span whose context the handler runs in (one attach / detach). It emits exactly as many spans
  per round trip as ``instr`` does in the mode under test (counted first, per mode and K): the hooks
  take spans from a per-turn budget in message order, and inject / extract on every message.

All three share one tracer provider (``BatchSpanProcessor``, discarding exporter; sampled, or
``ParentBased(ALWAYS_OFF)`` for the unsampled runs, whose floor's spans are then unsampled too). They are
timed in short interleaved micro-rounds (the order rotates), each on a fresh connection pair, because this
machine's speed drifts 2x within seconds; the figure is the median over micro-rounds of
``(instr - bare) / (floor - bare)``, with GC on. Where ``valgrind`` is installed, the same three variants
are also counted in executed instructions (``cachegrind --cache-sim=no``, GC off): the difference between
two run lengths, divided by the difference in turns, gives instructions per round trip without start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

VARIANTS = ("bare", "floor", "instr")
# Informational (--contract-floor): the floor's spans carrying the instrumented spans' own attributes.
CONTRACT_FLOOR = "floor-contract"
TARGET = 1.10

# ------------------------------------------------------------------------------------------ set-up


def _provider(sampling: str) -> tuple[Any, Any]:
    """A global tracer provider with a batch processor and a discarding, counting exporter."""
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

    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF)) if sampling == "unsampled" else TracerProvider()
    exporter = DiscardExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider, exporter


def _sdk_spans_off() -> None:
    # "bare" is the SDK without its own spans; the instrumentation replaces them anyway (keep_sdk_spans off).
    try:
        import acp.telemetry

        setattr(acp.telemetry, "TRACER", None)  # noqa: B010 - the module's public global, typed as a Tracer
    except (ImportError, AttributeError):
        pass


def default_mode() -> str:
    """The ``notification_spans`` setting in force when the user sets nothing."""
    from acp_otel._settings import load_settings

    return load_settings({}).notification_spans


class Instrumented:
    """The ``instr`` variant: acp-otel with its defaults and ``notification_spans=mode``."""

    def __init__(self, provider: Any, mode: str) -> None:
        self.provider = provider
        self.mode = mode
        from acp_otel import AcpInstrumentor

        self._instrumentor = AcpInstrumentor()

    def __enter__(self) -> None:
        self._instrumentor.instrument(tracer_provider=self.provider, notification_spans=self.mode)

    def __exit__(self, *exc: Any) -> None:
        self._instrumentor.uninstrument()


class Bare:
    """The ``bare`` variant: nothing patched."""

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        pass


class Floor:
    """The in-situ floor: plain functions at the SDK's four hooks doing the least tracing can do.

    ``spans_per_turn`` spans are handed out per prompt turn, in message order (the prompt request's send
    and receive first, then each notification's send and receive), so that the floor emits exactly as
    many spans as the instrumentation does in the mode under test. Every message is injected / extracted.
    """

    def __init__(self, spans_per_turn: int, attributes: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.spans_per_turn = spans_per_turn
        # (method, span kind name) -> the attributes to set instead of the two minimal ones.
        self.attributes = attributes or {}
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        from acp.connection import Connection
        from opentelemetry import context as otel_context
        from opentelemetry import propagate, trace
        from opentelemetry.context import Context
        from opentelemetry.trace import SpanKind

        tracer = trace.get_tracer("acp_otel.floor")
        inject, extract, set_span = propagate.inject, propagate.extract, trace.set_span_in_context
        attach, detach = otel_context.attach, otel_context.detach
        budget = [0]
        per_turn = self.spans_per_turn
        contract = self.attributes

        def take() -> bool:
            if budget[0] > 0:
                budget[0] -= 1
                return True
            return False

        def start(method: str, kind: SpanKind, parent: Any = None) -> Any:
            attributes = contract.get((method, kind.name)) or {"rpc.system.name": "jsonrpc", "acp.method.name": method}
            return tracer.start_span(method, context=parent, kind=kind, attributes=attributes)

        def inject_into(params: Any, span: Any) -> Any:
            carrier: dict[str, str] = {}
            inject(carrier, context=set_span(span) if span is not None else None)
            if type(params) is dict:
                meta = params.get("_meta")
                if meta is None:
                    params["_meta"] = carrier
                elif type(meta) is dict:
                    meta.update(carrier)
            elif params is None:
                params = {"_meta": carrier}
            return params

        def parent_of(message: dict[str, Any]) -> Any:
            params = message.get("params")
            meta = params.get("_meta") if type(params) is dict else None
            return extract(meta, context=Context()) if type(meta) is dict else Context()

        saved = self._saved
        hooks = ["send_request", "send_notification", "_run_notification"]
        hooks.append("_execute_request" if "_execute_request" in Connection.__dict__ else "_run_request")
        for name in hooks:
            saved[name] = Connection.__dict__[name]

        async def send_request(conn: Any, method: str, params: Any = None) -> Any:
            if method == "session/prompt":
                budget[0] = per_turn
            span = start(method, SpanKind.CLIENT) if take() else None
            try:
                return await saved["send_request"](conn, method, inject_into(params, span))
            finally:
                if span is not None:
                    span.end()

        async def send_notification(conn: Any, method: str, params: Any = None) -> Any:
            span = start(method, SpanKind.PRODUCER) if take() else None
            try:
                return await saved["send_notification"](conn, method, inject_into(params, span))
            finally:
                if span is not None:
                    span.end()

        def incoming(name: str, kind: SpanKind) -> Callable[..., Any]:
            original = saved[name]

            async def hook(conn: Any, message: dict[str, Any], *rest: Any) -> Any:
                parent = parent_of(message)
                span = start(message["method"], kind, parent) if take() else None
                token = attach(set_span(span, parent) if span is not None else parent)
                try:
                    return await original(conn, message, *rest)
                finally:
                    detach(token)
                    if span is not None:
                        span.end()

            return hook

        for name, hook in (
            ("send_request", send_request),
            ("send_notification", send_notification),
            (hooks[3], incoming(hooks[3], SpanKind.SERVER)),
            ("_run_notification", incoming("_run_notification", SpanKind.CONSUMER)),
        ):
            setattr(Connection, name, hook)

    def __exit__(self, *exc: Any) -> None:
        from acp.connection import Connection

        for name, original in self._saved.items():
            setattr(Connection, name, original)
        self._saved.clear()


async def _count_spans_per_turn(mode: str, ks: list[int]) -> tuple[dict[int, int], dict[tuple[str, str], Any]]:
    """Spans the instrumentation emits per prompt turn in ``mode``, through an always-sampling provider.

    Also the attributes its spans end with, per (method, kind), for the informational contract floor.
    """
    from _bench_app import BenchPair
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    attributes: dict[tuple[str, str], Any] = {}

    class Counter(SpanProcessor):
        ended = 0

        def on_end(self, span: Any) -> None:
            self.ended += 1
            method = span.attributes.get("acp.method.name", span.name)
            attributes[(method, span.kind.name)] = dict(span.attributes)

    counter = Counter()
    provider = TracerProvider()
    provider.add_span_processor(counter)
    turns = 4

    out = {}
    with Instrumented(provider, mode):
        for k in ks:
            pair = await BenchPair().start()
            before = counter.ended
            for _ in range(turns):
                await pair.prompt(f"k={k}")
            out[k] = round((counter.ended - before) / turns)
            await pair.close()
    return out, attributes


def _variant(name: str, provider: Any, mode: str, spans: int, attributes: dict[tuple[str, str], Any]) -> Any:
    if name == "instr":
        return Instrumented(provider, mode)
    if name == "floor":
        return Floor(spans)
    if name == CONTRACT_FLOOR:
        return Floor(spans, attributes)
    return Bare()


# ------------------------------------------------------------------------------------------ workers


def _turns(k: int, turns_k1: int) -> int:
    return max(3, turns_k1 * 2 // (k + 1))


async def _micro_rounds(args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved micro-rounds: per round, per K, each variant on a fresh pair (rotating order)."""
    from _bench_app import BenchPair

    ks = [int(k) for k in args.ks.split(",")]
    _sdk_spans_off()
    spans, attributes = await _count_spans_per_turn(args.mode, ks)
    provider, _exporter = _provider(args.sampling)
    variants = (*VARIANTS, CONTRACT_FLOOR) if args.contract_floor else VARIANTS
    times: dict[int, dict[str, list[float]]] = {k: {v: [] for v in variants} for k in ks}
    for r in range(args.rounds + 1):  # round 0 warms up every path and is not recorded
        for k in ks if r % 2 else reversed(ks):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            n = _turns(k, args.turns)
            text = f"k={k}"
            for name in order:
                with _variant(name, provider, args.mode, spans[k], attributes):
                    pair = await BenchPair().start()
                    await pair.prompt(text)
                    provider.force_flush()  # each timed section starts with an empty span queue
                    t0 = time.perf_counter()
                    for _ in range(n):
                        await pair.prompt(text)
                    elapsed = time.perf_counter() - t0
                    await pair.close()
                if r:
                    times[k][name].append(elapsed / n * 1e6)
    provider.shutdown()
    return {"spans": spans, "times": times}


async def _icount_run(args: argparse.Namespace) -> None:
    """One variant for ``--turns`` turns at one K, GC off: run under valgrind, twice, at two lengths."""
    from _bench_app import BenchPair

    gc.disable()
    k = int(args.ks)
    _sdk_spans_off()
    spans, attributes = await _count_spans_per_turn(args.mode, [k])
    provider, _exporter = _provider(args.sampling)
    with _variant(args.icount, provider, args.mode, spans[k], attributes):
        pair = await BenchPair().start()
        for _ in range(3):  # warm-up, in both run lengths alike
            await pair.prompt(f"k={k}")
        provider.force_flush()
        for _ in range(args.turns):
            await pair.prompt(f"k={k}")
        await pair.close()
    provider.shutdown()


# ------------------------------------------------------------------------------------------ parent


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}  # a stray OTEL_* changes variants
    env["PYTHONHASHSEED"] = "0"  # the same work in every valgrind run
    return env


def _run_worker(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(f"worker {argv} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _instructions(argv: list[str]) -> int:
    """Instructions executed by one worker run under cachegrind (no cache simulation)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            f"--cachegrind-out-file={os.path.join(tmp, 'cg.out')}",
            sys.executable,
            os.path.abspath(__file__),
            *argv,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=1800)
    match = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"valgrind {argv} failed:\n{out.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def _ratio(instr: float, bare: float, floor: float) -> float:
    return (instr - bare) / (floor - bare) if floor != bare else float("nan")


def _quartiles(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    q = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q[0]:.2f}–{q[2]:.2f}"


def _verdict(value: float) -> str:
    return "met" if value <= TARGET else "MISSED"


def _contract_note(args: argparse.Namespace) -> None:
    if args.contract_floor:
        print(
            "  (info) vs contract floor: (instr − bare) / (floor-contract − bare), the floor's spans carrying the "
            "instrumented spans' own attributes: what is left once the span contract's attributes are paid"
        )


def _wall(args: argparse.Namespace, modes: list[str], samplings: list[str]) -> None:
    ks = [int(k) for k in args.ks.split(",")]
    print(
        f"\nWall time: {args.rounds} micro-rounds per variant and K (fresh connection pair each; "
        f"{args.turns} turns at K=1, {_turns(max(ks), args.turns)} at K={max(ks)}), µs per turn (medians)"
    )
    extra = " (info) vs contract floor |" if args.contract_floor else ""
    print(
        "| sampling | notification_spans | K | spans/turn | bare | floor | instr | ratio (median) | p25–p75 "
        f"| target ≤ 1.10 |{extra}"
    )
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if extra else ""))
    # Our overhead (instr - bare, median of the per-round differences) per (sampling, mode) and K.
    overhead: dict[tuple[str, str], dict[int, float]] = {}
    for sampling in samplings:
        for mode in modes:
            common = ["--ks", args.ks, "--turns", str(args.turns), "--rounds", str(args.rounds)]
            if args.contract_floor:
                common.append("--contract-floor")
            res = _run_worker(["--worker", "--sampling", sampling, "--mode", mode, *common])
            for k in ks:
                t = res["times"][str(k)]
                ratios = [_ratio(i, b, f) for b, f, i in zip(t["bare"], t["floor"], t["instr"], strict=True)]
                ratio = statistics.median(ratios)
                med = {v: statistics.median(t[v]) for v in VARIANTS}
                overhead.setdefault((sampling, mode), {})[k] = statistics.median(
                    i - b for b, i in zip(t["bare"], t["instr"], strict=True)
                )
                cell = ""
                if args.contract_floor:
                    info = [_ratio(i, b, f) for b, f, i in zip(t["bare"], t[CONTRACT_FLOOR], t["instr"], strict=True)]
                    cell = f" {statistics.median(info):.2f} |"
                print(
                    f"| {sampling} | {mode} | {k} | {res['spans'][str(k)]} | {med['bare']:.0f} | {med['floor']:.0f} | "
                    f"{med['instr']:.0f} | **{ratio:.2f}** | {_quartiles(ratios)} | {_verdict(ratio)} |{cell}",
                    flush=True,
                )
    _contract_note(args)
    _per_chunk(overhead, ks)


def _valgrind(args: argparse.Namespace, modes: list[str], samplings: list[str]) -> None:
    ks = [int(k) for k in args.ks.split(",")]
    short, long = args.icount_turns
    variants = (*VARIANTS, CONTRACT_FLOOR) if args.contract_floor else VARIANTS
    print(
        "\nInstructions per turn under valgrind (cachegrind --cache-sim=no, GC off; "
        f"difference of runs of {short} and {long} turns at K=1, fewer at larger K)"
    )
    extra = " (info) floor-contract | (info) vs contract floor |" if args.contract_floor else ""
    print(
        "| sampling | notification_spans | K | bare | floor | instr | floor − bare | instr − bare | ratio "
        f"| target ≤ 1.10 |{extra}"
    )
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if extra else ""))
    jobs = []
    for sampling in samplings:
        for mode in modes:
            for k in ks:
                # Fewer turns at large K: the work per turn grows with K.
                n1, n2 = (max(2, n * 2 // (k + 1)) for n in (short, long))
                for name in variants:
                    base = ["--icount", name, "--sampling", sampling, "--mode", mode, "--ks", str(k)]
                    jobs.append(((sampling, mode, k, name, n1), [*base, "--turns", str(n1)]))
                    jobs.append(((sampling, mode, k, name, n2), [*base, "--turns", str(n2)]))
    # Instruction counts do not depend on load, so two runs at a time (most of each is start-up).
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            counts = dict(zip((key for key, _ in jobs), pool.map(_instructions, (a for _, a in jobs)), strict=True))
    except RuntimeError as exc:  # a valgrind that cannot run here must not fail the wall-time report
        print(f"valgrind failed, instruction counts skipped: {str(exc)[:500]}")
        return
    for sampling in samplings:
        for mode in modes:
            for k in ks:
                n1, n2 = (max(2, n * 2 // (k + 1)) for n in (short, long))
                per_turn = {
                    name: (counts[(sampling, mode, k, name, n2)] - counts[(sampling, mode, k, name, n1)]) / (n2 - n1)
                    for name in variants
                }
                b, f, i = per_turn["bare"], per_turn["floor"], per_turn["instr"]
                ratio = _ratio(i, b, f)
                cell = ""
                if args.contract_floor:
                    c = per_turn[CONTRACT_FLOOR]
                    cell = f" {c / 1e3:.0f}k | {_ratio(i, b, c):.2f} |"
                print(
                    f"| {sampling} | {mode} | {k} | {b / 1e3:.0f}k | {f / 1e3:.0f}k | {i / 1e3:.0f}k | "
                    f"{(f - b) / 1e3:.0f}k | {(i - b) / 1e3:.0f}k | **{ratio:.2f}** | {_verdict(ratio)} |{cell}",
                    flush=True,
                )
    _contract_note(args)


def _per_chunk(overhead: dict[tuple[str, str], dict[int, float]], ks: list[int]) -> None:
    """What each streamed session/update adds to our overhead: the slope between the smallest and largest K."""
    low, high = min(ks), max(ks)
    if low == high:
        return
    cells = [
        f"{mode} ({sampling}) {(by_k[high] - by_k[low]) / (high - low):.1f} µs"
        for (sampling, mode), by_k in overhead.items()
    ]
    print(f"\nOur cost per streamed chunk (instr − bare, K={low} → K={high}, send + receive): " + " · ".join(cells))


def _parent(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    import opentelemetry.sdk.version

    import acp_otel

    try:
        from importlib.metadata import version

        sdk = version("agent-client-protocol")
    except Exception:
        sdk = "?"
    modes = list(dict.fromkeys(default_mode() if m == "default" else m for m in args.modes.split(",")))
    samplings = args.sampling.split(",")
    print(
        f"machine: nproc={os.cpu_count()}, cpu={_cpu_model()}, python={sys.version.split()[0]}, "
        f"acp SDK {sdk}, opentelemetry-sdk {opentelemetry.sdk.version.__version__}, acp-otel {acp_otel.__version__}; "
        f"default notification_spans={default_mode()}"
    )
    _wall(args, modes, samplings)
    if args.no_valgrind:
        print("\nvalgrind: skipped (--no-valgrind)")
    elif shutil.which("valgrind") is None:
        print("\nvalgrind: not installed, instruction counts skipped (apt-get install valgrind)")
    else:
        if args.smoke:  # one configuration (K=1, default mode, sampled): each valgrind run takes ~15 s
            args.ks = args.ks.split(",")[0]
            _valgrind(args, modes[:1], samplings[:1])
        else:
            _valgrind(args, modes, samplings)
    print(f"\nwall time: {time.perf_counter() - started:.0f} s")


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
    parser.add_argument("--smoke", action="store_true", help="short run for CI")
    parser.add_argument("--rounds", type=int, default=None, help="micro-rounds per variant and K")
    parser.add_argument("--turns", type=int, default=None, help="turns per micro-round at K=1 (fewer at larger K)")
    parser.add_argument("--ks", default="1,20", help="session/updates per turn, comma-separated")
    parser.add_argument("--modes", default="default,all", help="notification_spans values ('default' = the default)")
    parser.add_argument("--sampling", default="sampled,unsampled", help="sampled and/or unsampled")
    parser.add_argument("--no-valgrind", action="store_true", help="skip the instruction counts")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    parser.add_argument("--icount-turns", type=lambda s: tuple(int(x) for x in s.split(",")), default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--contract-floor",
        action="store_true",
        help="also time the floor with the instrumented spans' own attributes (informational)",
    )
    parser.add_argument("--icount", choices=(*VARIANTS, CONTRACT_FLOOR), help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = (("rounds", 40, 200), ("turns", 12, 20), ("icount_turns", (10, 30), (20, 80)))
    for name, smoke_default, full_default in defaults:
        if getattr(args, name) is None:
            setattr(args, name, smoke_default if args.smoke else full_default)
    if args.worker:
        print(json.dumps(asyncio.run(_micro_rounds(args))))
    elif args.icount:
        asyncio.run(_icount_run(args))
    else:
        _parent(args)


if __name__ == "__main__":
    main()
