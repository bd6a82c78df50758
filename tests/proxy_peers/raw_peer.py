"""A raw NDJSON agent for the proxy tests: records exactly the bytes it receives, sends a given file.

    python raw_peer.py RECORD SEND [--exit N] [--trap-signals MARKER] [--flood BYTES] [--hold]

It writes SEND's bytes to stdout as they are (unless ``--hold``: then only once stdin ends), copies
every byte of stdin to RECORD (flushed per read, so a test can watch it grow), and exits with status N
at end of input. ``--flood BYTES`` writes that many bytes of small notification lines first.
``--trap-signals MARKER`` appends each received signal's name to MARKER and exits 40 + its number.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

# 4 KiB notifications: big enough that a flood is many megabytes, few enough lines to trace quickly.
FLOOD_LINE = b'{"jsonrpc":"2.0","method":"flood/tick","params":{"pad":"' + b"p" * 4000 + b'"}}\n'


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("record")
    parser.add_argument("send")
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--trap-signals")
    parser.add_argument("--flood", type=int, default=0)
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    if args.trap_signals:
        marker = args.trap_signals

        def on_signal(signum: int, _frame: object) -> None:
            with open(marker, "a") as f:
                f.write(signal.Signals(signum).name + "\n")
            os._exit(40 + signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
    out = sys.stdout.buffer
    with open(args.send, "rb") as f:
        payload = f.read()

    def record() -> None:
        # Reading runs beside the writing, as in a real agent: a full stdout must not stop stdin.
        with open(args.record, "wb") as recording:
            while data := os.read(0, 65536):
                recording.write(data)
                recording.flush()

    reader = threading.Thread(target=record)
    reader.start()
    if args.flood:
        for _ in range(args.flood // len(FLOOD_LINE) + 1):
            out.write(FLOOD_LINE)
        out.flush()
    if not args.hold:
        out.write(payload)
        out.flush()
    reader.join()
    if args.hold:
        out.write(payload)
        out.flush()
    return int(args.exit)


if __name__ == "__main__":
    sys.exit(main())
