"""The ACP SDK's source distribution (it alone ships the SDK's tests and examples), downloaded once.

Used by ``scripts/sdk_suite.py`` (the SDK's own test suite) and ``tests/test_e2e.py`` (the SDK's own
examples). Standard library only. The cache folder is ``.nox/_sdk_suite`` in the repository unless
``ACP_OTEL_SDK_CACHE`` names another; ``python tests/support/sdk_sdist.py [VERSION ...]`` fetches the given
releases and prints it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ACP_OTEL_SDK_CACHE", ROOT / ".nox" / "_sdk_suite"))
DOWNLOAD_TIMEOUT = 180  # seconds; callers' own timeouts must allow for it


def fetch_sdist(version: str, cache_dir: Path = CACHE, timeout: float = DOWNLOAD_TIMEOUT) -> Path:
    """The unpacked sdist of ``agent-client-protocol==version`` (downloaded and unpacked once per cache).

    Raises ``RuntimeError`` (with pip's output) when it cannot be downloaded.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    unpacked = cache_dir / f"agent_client_protocol-{version}"
    if (unpacked / "pyproject.toml").is_file():
        return unpacked
    archive = cache_dir / f"agent_client_protocol-{version}.tar.gz"
    if not archive.exists():
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps"]
        cmd += ["-d", str(cache_dir), f"agent-client-protocol=={version}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0 or not archive.exists():
            raise RuntimeError(f"could not download the sdist of agent-client-protocol=={version}: {done.stderr}")
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp, tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.10.12+/3.11.4+ security releases
            tar.extractall(tmp, filter="data")
        else:  # pragma: no cover - older patch releases
            tar.extractall(tmp)
        if not (unpacked / "pyproject.toml").is_file():  # another process may have unpacked it meanwhile
            shutil.rmtree(unpacked, ignore_errors=True)
            shutil.move(str(Path(tmp) / unpacked.name), unpacked)
    return unpacked


if __name__ == "__main__":
    # `python tests/support/sdk_sdist.py [VERSION ...]`: fetches the given releases (`.ci/run`, before nox
    # sessions that share the cache run side by side), then prints the cache folder.
    for _version in sys.argv[1:]:
        fetch_sdist(_version)
    print(CACHE)
