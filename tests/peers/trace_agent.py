"""The tests' agent (``acp_app.TraceAgent``, or another of ``acp_app.AGENTS``) as a stdio process.

    python tests/peers/trace_agent.py [nokwargs]

Instrumented only when ``ACP_OTEL_TEST_SPANS`` is set (see ``acp_app.agent_main``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, possibly with the SDK's trimmed environment (no PYTHONPATH): find the support modules.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))

from acp_app import agent_main

if __name__ == "__main__":
    agent_main(sys.argv[1:])
