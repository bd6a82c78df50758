"""Real third-party agents (npm / PyPI) driven through ``acp-otel proxy``: collected only when asked for.

The default test run (every CI matrix cell) skips this directory; ``ACP_OTEL_REAL_AGENTS=1`` (set by the
``real_agents`` nox session, which also installs the agents) collects it.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

if os.environ.get("ACP_OTEL_REAL_AGENTS") != "1":
    collect_ignore_glob = ["test_*.py"]
else:  # the helpers here import by their module names (agents, editor, sink, ...)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

    from model_server import ModelServer, Script
    from sink import Sink

    # The fixtures every real-agent case takes: a workspace with a canary, the scripted model, the OTLP sink.
    @pytest.fixture
    def script(tmp_path: Path) -> Script:
        s = Script(tmp_path / "workspace", f"CANARY{uuid.uuid4().hex[:12]}")
        s.prepare()
        return s

    @pytest.fixture
    def model(script: Script) -> Iterator[ModelServer]:
        with ModelServer(script) as m:
            yield m

    @pytest.fixture
    def sink() -> Iterator[Sink]:
        with Sink() as s:
            yield s
