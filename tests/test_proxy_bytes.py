"""Byte fidelity: a hostile corpus through a real proxy process, both directions at once.

The editor side is this test writing raw bytes to the proxy's stdin and reading its stdout; the agent
is a raw NDJSON peer that records exactly the bytes it received. Every line must arrive as it was
sent, except for the traceparent the proxy writes into ``params._meta`` of what it injects into.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import corpus
import hostile_corpus
import pytest
import raw_peer
from harness import PROXY, RAW_PEER, base_env, untraced_env
from otlp_sink import OtlpSink

pytestmark = pytest.mark.e2e


def relay(
    tmp_path: Path, editor_bytes: bytes, agent_bytes: bytes, env: dict[str, str], proxy_args: list[str]
) -> tuple[bytes, bytes, int, bytes]:
    """Run editor_bytes -> proxy -> raw agent and agent_bytes back; (agent got, editor got, status, stderr)."""
    record, send = tmp_path / "agent-received", tmp_path / "agent-sends"
    send.write_bytes(agent_bytes)
    proc = subprocess.Popen(
        [*PROXY, *proxy_args, "--", *RAW_PEER, str(record), str(send)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    received = bytearray()
    errors = bytearray()

    def write() -> None:
        view = memoryview(editor_bytes)
        for start in range(0, len(view), 1 << 20):  # in pieces, so lines straddle the proxy's reads
            proc.stdin.write(view[start : start + (1 << 20)])  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]

    def read(stream: object, into: bytearray) -> None:
        while chunk := stream.read(1 << 16):  # type: ignore[attr-defined]
            into.extend(chunk)

    threads = [
        threading.Thread(target=write),
        threading.Thread(target=read, args=(proc.stdout, received)),
        threading.Thread(target=read, args=(proc.stderr, errors)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    status = proc.wait(30)
    return record.read_bytes(), bytes(received), status, bytes(errors)


CASES = [*corpus.UNCHANGED, *corpus.INJECTED]


@pytest.mark.parametrize("mode", ["injecting", "no-inject", "tracing-off"])
def test_corpus_both_ways(tmp_path: Path, mode: str) -> None:
    """The corpus, with a 50 MB line and a final line without newline, each way at once, in each mode."""
    with OtlpSink() as sink:
        env = base_env(**sink.env()) if mode != "tracing-off" else untraced_env()
        # A generous flush bound: on a loaded machine the default (1 s) may end the export early, which the
        # proxy reports on stderr; this test is about the bytes.
        args = ["--flush-timeout", "10", *(["--no-inject"] if mode == "no-inject" else [])]
        cases = [*CASES, corpus.BIG] if mode == "injecting" else CASES
        data = corpus.stream(cases, corpus.FINAL)
        agent_got, editor_got, status, stderr = relay(tmp_path, data, data, env, args)
        injecting = mode == "injecting"
        assert corpus.check(agent_got, cases, corpus.FINAL, injecting) == []
        assert corpus.check(editor_got, cases, corpus.FINAL, injecting) == []
        assert status == 0 and stderr == b""
        if injecting:
            # The sender's context was honoured: the proxy's span continues the sender's trace.
            line = next(li for li in agent_got.split(b"\n") if b'"m/ctx"' in li)
            match = corpus.TP_RE.search(line)
            assert match is not None and match.group(1).decode().split("-")[1] == corpus.TRACE_ID
            spans = sink.wait_for(lambda s: any(x.name == "m/ctx" for x in s))
            ctx_spans = [s for s in spans if s.name == "m/ctx"]
            assert {s.trace_id for s in ctx_spans} == {corpus.TRACE_ID}
            assert {s.parent_id for s in ctx_spans} == {corpus.TP_VALID.split("-")[2]}


def test_no_injection_keeps_every_byte_of_a_real_conversation(tmp_path: Path) -> None:
    """With tracing on and --no-inject, whole streams (requests, answers, updates) pass identically."""
    lines = [
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan"}}}',
    ] * 200
    data = b"\n".join(lines) + b"\n"
    with OtlpSink() as sink:
        agent_got, editor_got, status, _ = relay(tmp_path, data, data, base_env(**sink.env()), ["--no-inject"])
    assert agent_got == data and editor_got == data and status == 0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the proxy's memory from /proc")
def test_flood_one_way_is_bounded_and_the_other_way_is_not_blocked(tmp_path: Path) -> None:
    """The agent floods while the editor does not read: the proxy's memory stays flat (backpressure), and
    a message from the editor still reaches the agent meanwhile (no direction waits on the other)."""
    flood = 64 * 1024 * 1024
    record, send = tmp_path / "agent-received", tmp_path / "agent-sends"
    send.write_bytes(b"")
    with OtlpSink() as sink:
        proc = subprocess.Popen(
            [*PROXY, "--", *RAW_PEER, str(record), str(send), "--flood", str(flood)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=base_env(**sink.env()),
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            time.sleep(1.0)  # the flood fills the pipes; nobody reads the proxy's stdout
            ping = b'{"jsonrpc":"2.0","id":1,"method":"m/ping","params":{"_meta":{"traceparent":"x"}}}\n'
            proc.stdin.write(ping)
            proc.stdin.flush()
            deadline = time.monotonic() + 10
            while b"m/ping" not in (record.read_bytes() if record.exists() else b""):
                assert time.monotonic() < deadline, "the editor's message did not get through during the flood"
                time.sleep(0.05)
            stalled_rss = _rss_kib(proc.pid)
            proc.stdin.close()
            total = 0
            newlines = 0
            while chunk := proc.stdout.read(1 << 20):
                total += len(chunk)
                newlines += chunk.count(b"\n")
        finally:
            if proc.poll() is None and sys.exc_info()[0] is not None:
                proc.kill()
            proc.wait(60)
    line_bytes = len(raw_peer.FLOOD_LINE)
    # Every flood line arrived (each one got trace context, so they grew).
    assert newlines == flood // line_bytes + 1
    assert total > flood
    # Memory: the interpreter and libraries plus a few read chunks, nothing like the 64 MB that was waiting.
    assert stalled_rss < 120 * 1024, f"proxy RSS {stalled_rss} KiB during the flood"
    assert proc.returncode == 0


TRACE_KEYS = ("traceparent", "tracestate", "baggage")


def _numbered(lines: list[dict[str, object]], start: int) -> list[dict[str, object]]:
    out = []
    for i, line in enumerate(lines):
        line = dict(line)
        if "id" in line:
            line["id"] = start + i
        out.append(line)
    return out


def _check_hostile_line(sent: bytes, got: bytes) -> str | None:
    """``None`` when ``got`` is ``sent`` with only trace values in ``params._meta`` written."""
    message = json.loads(sent)
    meta = message["params"]["_meta"]
    if meta is not None and type(meta) is not dict:  # the proxy cannot add context: nothing may change
        return None if got == sent else "changed a message whose _meta is not an object"
    head = sent[: sent.rindex(b'"_meta"')]
    if not got.startswith(head) or not got.endswith(b"}}"):
        return "bytes outside _meta changed"
    got_meta = json.loads(got)["params"]["_meta"]
    if not re.search(rb'"traceparent"\s*:\s*"00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-9a-f]"', got):
        return "no traceparent written"
    others = [(k, v) for k, v in (meta or {}).items() if k not in TRACE_KEYS]
    if [(k, v) for k, v in got_meta.items() if k not in TRACE_KEYS] != others:
        return "other _meta keys changed or moved"
    return None


def test_hostile_meta_both_ways(tmp_path: Path) -> None:
    """Every malformed / oversized / non-string trace context of the shared hostile corpus, both ways:
    only trace values change, no baggage value reaches a span, and the proxy logs nothing."""
    to_agent, to_editor = [], []
    for n, meta in enumerate(hostile_corpus.META_VARIANTS.values()):
        to_agent += _numbered(hostile_corpus.agent_lines_for_meta(meta), 10 * n)
        to_editor += _numbered(hostile_corpus.client_lines_for_meta(meta), 10 * n)
    agent_lines = [json.dumps(m).encode() for m in to_agent]
    editor_lines = [json.dumps(m).encode() for m in to_editor]
    with OtlpSink() as sink:
        agent_got, editor_got, status, stderr = relay(
            tmp_path,
            b"\n".join(agent_lines) + b"\n",
            b"\n".join(editor_lines) + b"\n",
            base_env(**sink.env()),
            ["--flush-timeout", "10"],  # see test_corpus_both_ways
        )
        assert status == 0 and stderr == b""
        for sent_lines, got in ((agent_lines, agent_got), (editor_lines, editor_got)):
            got_lines = got.split(b"\n")
            assert len(got_lines) == len(sent_lines) + 1 and got_lines[-1] == b""
            problems = [
                (s[:120], p) for s, g in zip(sent_lines, got_lines, strict=False) if (p := _check_hostile_line(s, g))
            ]
            assert problems == []
        spans = sink.wait_for(lambda s: len(s) >= len(agent_lines) // 2)
    leaked = [s.name for s in spans if any(v in repr(s.attributes) for v in hostile_corpus.BAGGAGE_VALUES)]
    assert leaked == []


def test_lines_over_the_cap_are_relayed_untraced(tmp_path: Path) -> None:
    small = b'{"jsonrpc":"2.0","id":1,"method":"m/small","params":{}}'
    large = b'{"jsonrpc":"2.0","id":2,"method":"m/large","params":{"blob":"' + b"L" * 300_000 + b'"}}'
    data = small + b"\n" + large + b"\n"
    with OtlpSink() as sink:
        agent_got, _, status, _ = relay(tmp_path, data, b"", base_env(**sink.env()), ["--max-line-bytes", "100000"])
        spans = sink.wait_for(lambda s: any(x.name == "m/small" for x in s))
    got_small, got_large, end = agent_got.split(b"\n")
    assert corpus.TP_RE.search(got_small) and got_large == large and end == b"" and status == 0
    assert not any(s.name == "m/large" for s in spans)
