"""``python tap.py LOG -- CMD ARGS...``: run CMD, relaying stdio unchanged and recording both directions.

The bytes written to CMD's stdin are appended to ``LOG.in``, those it writes to stdout to ``LOG.out``.
Placed between the proxy and the agent, it records what the proxy sent and received on the agent's side.
Stdin's end closes CMD's stdin; CMD's exit ends the tap with its status (it does not wait for a grandchild
that still holds the pipe); SIGTERM / SIGINT / SIGHUP are forwarded to CMD.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading


def main() -> int:
    log, sep, *cmd = sys.argv[1:]
    assert sep == "--" and cmd, __doc__
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    to_agent, from_agent = open(log + ".in", "ab", buffering=0), open(log + ".out", "ab", buffering=0)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)

    def up() -> None:
        try:
            while chunk := os.read(0, 1 << 16):
                to_agent.write(chunk)
                child.stdin.write(chunk)  # type: ignore[union-attr]
        except OSError:
            pass
        finally:
            try:
                child.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass

    def down() -> None:
        try:
            while chunk := os.read(child.stdout.fileno(), 1 << 16):  # type: ignore[union-attr]
                from_agent.write(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(1, view) :]
        except OSError:
            pass

    threading.Thread(target=up, daemon=True).start()
    reader = threading.Thread(target=down, daemon=True)
    reader.start()
    code = child.wait()
    reader.join(2.0)  # what the agent wrote before exiting; a grandchild holding the pipe is not waited for
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    os._exit(main())
