"""Test-only hooks for the proxy's start-up, put on ``PYTHONPATH`` of the proxy process by tests/test_proxy_startup.py.

* ``ACP_OTEL_TEST_SDK_GATE=PATH``: importing ``opentelemetry.sdk.trace`` (the SDK the proxy's telemetry is
  built on; another module with ``ACP_OTEL_TEST_GATED_MODULE``) blocks until PATH exists, as a very slow
  import would; ``PATH.waiting`` is created when it starts waiting. Only that module's import waits (its
  loader blocks, not the finder: other imports go on).
* ``ACP_OTEL_TEST_SPAWN_MODULES=PATH``: when the process starts its first child (the ``subprocess.Popen``
  audit event), the names of the modules imported so far are written to PATH, one a line.
* ``ACP_OTEL_TEST_ENGINE_GATE=PATH``: the same gate as ``ACP_OTEL_TEST_SDK_GATE``, on ``acp_otel._engine``.
* ``ACP_OTEL_TEST_MODULES_ON=PATH``: once ``PATH.dump`` exists, the names of the modules imported by then are
  written to PATH, one a line (a thread looks for the file every 10 ms).

Each variable is removed from the environment once read, so that the agent the proxy starts is untouched.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def _gate(path: str, gated: str) -> None:
    import importlib.abc
    import importlib.machinery

    class GatedLoader(importlib.abc.Loader):
        def __init__(self, real: Any) -> None:
            self.real = real

        def create_module(self, spec: Any) -> Any:
            return self.real.create_module(spec)

        def exec_module(self, module: Any) -> None:
            open(path + ".waiting", "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.01)
            self.real.exec_module(module)

    class GateFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path_: Any, target: Any = None) -> Any:
            if name != gated:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path_)
            if spec is not None and spec.loader is not None:
                spec.loader = GatedLoader(spec.loader)
            return spec

    sys.meta_path.insert(0, GateFinder())


def _modules_on(path: str) -> None:
    import threading

    def watch() -> None:
        while not os.path.exists(path + ".dump"):
            time.sleep(0.01)
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(sorted(sys.modules)) + "\n")
        os.rename(path + ".tmp", path)

    threading.Thread(target=watch, daemon=True).start()


def _spawn_modules(path: str) -> None:
    done = []

    def hook(event: str, _args: Any) -> None:
        if event == "subprocess.Popen" and not done:
            done.append(True)
            with open(path, "w") as f:
                f.write("\n".join(sorted(sys.modules)) + "\n")

    sys.addaudithook(hook)


_gate_path = os.environ.pop("ACP_OTEL_TEST_SDK_GATE", None)
if _gate_path:
    _gate(_gate_path, os.environ.pop("ACP_OTEL_TEST_GATED_MODULE", "opentelemetry.sdk.trace"))
_engine_gate_path = os.environ.pop("ACP_OTEL_TEST_ENGINE_GATE", None)
if _engine_gate_path:
    _gate(_engine_gate_path, "acp_otel._engine")
_modules_path = os.environ.pop("ACP_OTEL_TEST_SPAWN_MODULES", None)
if _modules_path:
    _spawn_modules(_modules_path)
_modules_on_path = os.environ.pop("ACP_OTEL_TEST_MODULES_ON", None)
if _modules_on_path:
    _modules_on(_modules_on_path)
