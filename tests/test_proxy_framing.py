"""The proxy's line relay (:func:`acp_otel._proxy.framing.pump`) over real pipes, with tiny reads so that
lines straddle reads and the over-the-cap path is exercised."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_otel._proxy import framing


def run_pump(data: bytes, cap: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, list[bytes]]:
    monkeypatch.setattr(framing, "CHUNK_BYTES", chunk)
    handled: list[bytes] = []

    def handle(line: bytes) -> tuple[bytes, None]:
        handled.append(line)
        return line, None

    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    received = bytearray()

    def feed() -> None:
        framing.write_all(src_w, data)
        os.close(src_w)

    def drain() -> None:
        while piece := os.read(dst_r, 65536):
            received.extend(piece)

    threads = [threading.Thread(target=feed), threading.Thread(target=drain)]
    for t in threads:
        t.start()
    try:
        framing.pump(src_r, dst_w, handle, cap)
    finally:
        os.close(dst_w)
        os.close(src_r)
    for t in threads:
        t.join(10)
    os.close(dst_r)
    return bytes(received), handled


@settings(max_examples=120, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    final_newline=st.booleans(),
    cap=st.integers(min_value=1, max_value=30),
    chunk=st.integers(min_value=1, max_value=16),
)
def test_every_byte_in_order_and_only_lines_within_the_cap_are_handled(
    lines: list[bytes], final_newline: bool, cap: int, chunk: int
) -> None:
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    with pytest.MonkeyPatch.context() as monkeypatch:
        received, handled = run_pump(data, cap, chunk, monkeypatch)
    assert received == data
    expected_lines = data.split(b"\n")
    if expected_lines and expected_lines[-1] == b"":
        expected_lines.pop()  # after the final newline there is no line
    assert handled == [line for line in expected_lines if len(line) <= cap]


def test_a_rewritten_line_replaces_only_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "CHUNK_BYTES", 3)
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    os.write(src_w, b"keep\nchange\nkeep-too")
    os.close(src_w)
    framing.pump(src_r, dst_w, lambda line: (b"CHANGED" if line == b"change" else line, None), 100)
    os.close(dst_w)
    assert os.read(dst_r, 1000) == b"keep\nCHANGED\nkeep-too"


def test_a_lines_callback_runs_once_it_is_written_and_before_the_next_line_is_handled() -> None:
    """A notification and the prompt's response read in one chunk: the notification's span (ended by the
    callback) must end before the response is handled (which ends the turn span), not after."""
    events: list[str] = []
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    framing.write_all(src_w, b"notification\nresponse\nlast\n")  # one write: one read chunk
    os.close(src_w)

    def handle(line: bytes) -> tuple[bytes, Callable[[], None] | None]:
        events.append(f"handle {line.decode()}")
        if line != b"notification":
            return line, None

        def done() -> None:
            written = os.read(dst_r, 65536)  # what was written before the callback: the notification
            events.append(f"done after {written!r}")

        return line, done

    try:
        framing.pump(src_r, dst_w, handle, 1000)
    finally:
        os.close(dst_w)
        os.close(src_r)
    rest = os.read(dst_r, 65536)
    os.close(dst_r)
    assert events == ["handle notification", "done after b'notification\\n'", "handle response", "handle last"]
    assert rest == b"response\nlast\n"
