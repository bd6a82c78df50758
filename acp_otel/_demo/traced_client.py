"""Run the example client inside one root span, so the demo's whole run is a single trace.

``acp-otel demo`` starts this module under ``opentelemetry-instrument``::

    opentelemetry-instrument python -m acp_otel._demo.traced_client \\
        --client examples/client.py --trace-id-file /tmp/x -- [client arguments]

It loads ``examples/client.py`` from its path, opens the INTERNAL span ``acp-otel demo``, writes its
trace id (32 hex digits) to ``--trace-id-file`` and runs ``await client.main(argv)`` inside it. Every ACP
span of the run (the agent spawn, ``initialize``, ``session/new``, the ``session/prompt`` turn, and the
agent's spans, which join through ``params._meta``) then belongs to that trace. Without a root span,
each top-level request would be a trace of its own. The runner learns the trace id from the file,
which also works when spans go to an external collector instead of the embedded receiver.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from acp_otel.version import __version__

ROOT_SPAN_NAME = "acp-otel demo"


def load_client(path: Path) -> ModuleType:
    """Import the example client module from ``path`` (it has ``async def main(argv)``)."""
    spec = importlib.util.spec_from_file_location("acp_otel_demo_example_client", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    """Run the client's ``main`` inside the root span; return its exit status."""
    parser = argparse.ArgumentParser(prog="python -m acp_otel._demo.traced_client")
    parser.add_argument("--client", type=Path, required=True, help="path of the example client")
    parser.add_argument("--trace-id-file", type=Path, required=True, help="where to write the trace id")
    parser.add_argument("client_args", nargs=argparse.REMAINDER, help="arguments for the client, after --")
    args = parser.parse_args(argv)
    client_args = args.client_args[1:] if args.client_args[:1] == ["--"] else args.client_args

    client = load_client(args.client)
    tracer = trace.get_tracer("acp_otel._demo", __version__)
    with tracer.start_as_current_span(ROOT_SPAN_NAME, kind=SpanKind.INTERNAL) as span:
        span_context = span.get_span_context()
        trace_id = f"{span_context.trace_id:032x}" if span_context.is_valid else ""
        args.trace_id_file.write_text(trace_id + "\n", encoding="utf-8")
        result = client.main(client_args)
        code = asyncio.run(result) if inspect.iscoroutine(result) else result
        code = int(code or 0)
        if code != 0:
            span.set_status(Status(StatusCode.ERROR, f"example client exited with status {code}"))
    return code


if __name__ == "__main__":
    sys.exit(main())
