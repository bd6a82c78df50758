"""Where things are: the repository, the support modules, the peer entry points, the examples."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
PEERS = TESTS / "peers"
EXAMPLES = ROOT / "examples"

TRACE_AGENT = PEERS / "trace_agent.py"
"""The tests' agent as a stdio process (``python TRACE_AGENT [nokwargs]``)."""


def peer_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` plus the ``PYTHONPATH`` a peer process needs to import the support modules."""
    return {"PYTHONPATH": str(SUPPORT), **(env or {})}
