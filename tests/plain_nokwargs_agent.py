"""NoKwargsAgent over stdio with *no* instrumentation: stands for an agent process that is not traced."""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    import acp
    from acp_app import NoKwargsAgent

    asyncio.run(acp.run_agent(NoKwargsAgent()))
