"""The Rust SDK (crate ``agent-client-protocol``) through ``acp-otel proxy``: collected only when asked for.

The default test run skips this directory; ``ACP_OTEL_RUST_SDK=1`` (set by the ``rust_sdk`` nox session, which
builds the peers first with ``scripts/build_rust_peers.sh``) collects it. The ``rust_peers`` fixture builds them
when they are missing (a warm build takes a second); without cargo the tests skip with the reason, but under
``CI=true`` a missing cargo or a failed build fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BUILD = HERE.parents[1] / "scripts" / "build_rust_peers.sh"

if os.environ.get("ACP_OTEL_RUST_SDK") != "1":
    collect_ignore_glob = ["test_*.py"]
else:

    @pytest.fixture(scope="session")
    def rust_peers() -> Path:
        """The directory holding the built ``agent`` and ``client`` binaries."""
        if shutil.which("cargo") is None and os.environ.get("CI") != "true":
            pytest.skip("cargo is not installed: the Rust SDK peers cannot be built")
        done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            pytest.fail(f"scripts/build_rust_peers.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
        bin_dir = Path(done.stdout.strip().splitlines()[-1])
        for name in ("agent", "client"):
            assert (bin_dir / name).is_file(), f"{name} not built in {bin_dir}"
        return bin_dir
