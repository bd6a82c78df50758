"""Copy one direction of an NDJSON stream from a file descriptor to another, line by line, bounded.

Blocking reads and writes on raw descriptors, one thread per direction: a full destination pipe
blocks the writer, which stops reading, which fills the source pipe and blocks the sender. That is
the whole backpressure story, with at most one line (up to ``max_line_bytes``) and one read chunk
held in memory. A line longer than the cap is not traced: what is buffered is written out and the
rest of that line is copied chunk by chunk as it arrives.

The end of the source is end of file, or, once the source has been made non-blocking (the proxy does
that when the agent has exited, since a child of the agent may keep the pipe open for ever), the first
read that finds it empty. A :class:`PumpState` tells another thread whether the relay is waiting for
input with nothing in hand, i.e. whether everything read so far has been written.
"""

from __future__ import annotations

import os
from collections.abc import Callable

CHUNK_BYTES = 64 * 1024

# What a line handler returns: the bytes to forward in place of the line (without its newline), and
# a callback to run once they are written, before the next line is handled (or ``None``): a notification's
# span so ends before a response read with it in one chunk ends its request's span.
Handled = tuple[bytes, "Callable[[], None] | None"]
LineHandler = Callable[[bytes], Handled]


class PumpState:
    """What a running :func:`pump` is doing, for the thread that decides when the relay may stop.

    ``waiting`` is true while the pump is in (or about to enter) a read with everything read before
    written out; ``reads`` counts the reads that returned, so that a reader can tell a pump blocked on an
    empty pipe (``waiting`` and ``reads`` unchanged) from one that has just taken a chunk.
    """

    __slots__ = ("reads", "waiting")

    def __init__(self) -> None:
        self.waiting = False
        self.reads = 0


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte (``os.write`` may write less than asked on a pipe)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read(src: int, state: PumpState) -> bytes:
    state.waiting = True
    try:
        data = os.read(src, CHUNK_BYTES)
    except BlockingIOError:  # made non-blocking after the writer exited, and now empty: the end
        data = b""
    state.waiting = False
    state.reads += 1
    return data


def _run(after: list[Callable[[], None]]) -> None:
    for done in after:
        done()
    after.clear()


def pump(src: int, dst: int, handle: LineHandler | None, max_line_bytes: int, state: PumpState | None = None) -> None:
    """Relay ``src`` to ``dst`` until end of input; ``handle`` may rewrite each complete line.

    Without a handler the bytes are copied as read. A final line without newline is handled and
    forwarded without one. Raises ``OSError`` when ``dst`` is gone (the caller decides what that means).
    ``state`` is kept up to date for another thread (see :class:`PumpState`).
    """
    if state is None:
        state = PumpState()
    if handle is None:
        while data := _read(src, state):
            write_all(dst, data)
        return
    buffered = bytearray()  # the start of a line whose newline has not arrived yet
    streaming = False  # inside a line longer than the cap, copied untraced
    while data := _read(src, state):
        start = 0
        if streaming:
            newline = data.find(b"\n")
            if newline < 0:
                write_all(dst, data)
                continue
            start = newline + 1
            write_all(dst, data[:start])
            streaming = False
        out: list[bytes] = []
        after: list[Callable[[], None]] = []
        while (newline := data.find(b"\n", start)) >= 0:
            if buffered:
                buffered += data[start:newline]
                line = bytes(buffered)
                buffered.clear()
            else:
                line = data[start:newline]
            start = newline + 1
            if len(line) > max_line_bytes:
                out.append(line)
            else:
                if after:  # a line before this one waits to be out (a notification's span ends once it is written)
                    write_all(dst, b"".join(out))
                    out.clear()
                    _run(after)
                forward, done = handle(line)
                out.append(forward)
                if done is not None:
                    after.append(done)
            out.append(b"\n")
        rest = data[start:]
        if len(buffered) + len(rest) > max_line_bytes:
            out.append(bytes(buffered))
            out.append(rest)
            buffered.clear()
            streaming = True
        else:
            buffered += rest
        if out:
            write_all(dst, b"".join(out))
        _run(after)
    if buffered:
        forward, done = handle(bytes(buffered))
        write_all(dst, forward)
        if done is not None:
            done()
