"""The least a stdio relay can do, for ``benchmarks/proxy.py``: start the command first thing, copy bytes both ways.

python benchmarks/_plain_relay.py -- CMD [ARGS...]
"""

import os
import subprocess
import sys
import threading


def main() -> int:
    command = sys.argv[1:]
    if command[:1] == ["--"]:
        command = command[1:]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    agent_in = proc.stdin

    def copy(src: int, dst: int) -> None:
        while data := os.read(src, 65536):
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]

    def to_agent() -> None:
        try:
            copy(0, agent_in.fileno())
        except OSError:
            pass
        agent_in.close()

    threading.Thread(target=to_agent, daemon=True).start()
    try:
        copy(proc.stdout.fileno(), 1)
    except OSError:
        pass
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
