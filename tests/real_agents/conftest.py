"""Real third-party agents (npm / PyPI) driven through ``acp-otel proxy``: collected only when asked for.

The default test run (every CI matrix cell) skips this directory; ``ACP_OTEL_REAL_AGENTS=1`` (set by the
``real_agents`` nox session, which also installs the agents) collects it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if os.environ.get("ACP_OTEL_REAL_AGENTS") != "1":
    collect_ignore_glob = ["test_*.py"]
else:  # the helpers here import by their module names (agents, editor, sink, ...)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
