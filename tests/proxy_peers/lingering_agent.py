"""An agent shaped like codex-acp's: a wrapper that forwards no signal, in front of a child that outlives it.

    python lingering_agent.py wrapper SECONDS   # runs ``child`` with inherited stdio, waits for it, no signal handling
    python lingering_agent.py child SECONDS     # the tests' ACP agent; ignores SIGTERM; lives on after end of input

The wrapper does what an npm bin shim or ``sh -c`` without ``exec`` does (codex's node wrapper
``spawnSync``s its native binary): it starts the real agent with the same stdin, stdout and stderr and
forwards no signal, so a SIGTERM kills the wrapper only. The child speaks ACP (``acp_app.TraceAgent``),
ignores SIGTERM, and after end of input stays alive for ``SECONDS`` more (codex's native binary ignores
end of input), holding the stdio it inherited. SIGKILL ends either at once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    mode, linger = argv[0], float(argv[1])
    if mode == "wrapper":
        return subprocess.call([sys.executable, str(Path(__file__).resolve()), "child", argv[1]])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
    from acp_app import agent_main

    agent_main(["trace"])  # returns at end of input
    time.sleep(linger)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
