"""Start ``phoenix serve`` with every listener on loopback (run with the Phoenix virtual environment's Python).

``PHOENIX_HOST`` binds Phoenix's HTTP server (UI, REST, GraphQL, OTLP/HTTP) but Phoenix's OTLP/gRPC receiver
(``phoenix/server/grpc_server.py`` in arize-phoenix 20.26.1) always binds ``[::]:PHOENIX_GRPC_PORT``, every
interface, and no variable or flag changes that. Tests bind only loopback, so this launcher rewrites the
address the gRPC server is given to ``127.0.0.1`` with the same port before Phoenix starts; everything else
is Phoenix's own ``phoenix serve``, configured by the ``PHOENIX_*`` environment the test sets.

This file imports nothing from acp-otel or the tests: it runs in Phoenix's environment, not the tests'.
"""

from __future__ import annotations

import sys
from typing import Any

LOOPBACK = "127.0.0.1"


def _bind_grpc_to_loopback() -> None:
    from grpc.aio import _server

    original = _server.Server.add_insecure_port
    original_secure = _server.Server.add_secure_port

    def loopback(address: str) -> str:
        _host, _, port = address.rpartition(":")
        return f"{LOOPBACK}:{port}"

    def add_insecure_port(self: Any, address: str) -> int:
        return original(self, loopback(address))

    def add_secure_port(self: Any, address: str, credentials: Any) -> int:
        return original_secure(self, loopback(address), credentials)

    _server.Server.add_insecure_port = add_insecure_port  # type: ignore[method-assign]
    _server.Server.add_secure_port = add_secure_port  # type: ignore[method-assign]


def main() -> None:
    _bind_grpc_to_loopback()
    from phoenix.server.main import main as phoenix_main

    sys.argv = ["phoenix", "serve"]
    phoenix_main()


if __name__ == "__main__":
    main()
