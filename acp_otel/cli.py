"""The ``acp-otel`` command line: its argument parser and the dispatch to each subcommand, nothing else.

``acp-otel demo`` runs the example client and agent, traced, and shows the joined trace
(see :mod:`acp_otel._demo.runner`); ``acp-otel proxy -- CMD`` relays and traces any agent
(see :mod:`acp_otel._proxy`).

Editors start ``acp-otel proxy`` on every agent start, and the agent is started before anything heavy is
imported: ``acp-otel proxy -- CMD ...`` is read without a parser (:func:`._proxy.options.plain_command`), other
``acp-otel proxy ...`` command lines by the proxy's own parser (argparse and :mod:`._proxy.options` only),
without the demo's modules; the full parser is built for everything else.
"""

from __future__ import annotations

import sys

from ._proxy import options as proxy_options
from .version import __version__

TYPE_CHECKING = False  # not typing's: imported before the proxy's agent starts (type checkers see True)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ._proxy.options import ProxyOptions

PROXY_HELP = "relay and trace an ACP agent's stdio: acp-otel proxy [options] -- CMD [ARGS...]"


def build_parser() -> argparse.ArgumentParser:
    """The ``acp-otel`` argument parser with its subcommands."""
    import argparse

    from ._demo import runner

    parser = argparse.ArgumentParser(
        prog="acp-otel", description="OpenTelemetry tracing for the Agent Client Protocol."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="run the example client and agent, traced, and show the trace",
        description=(
            "Run the example client (which spawns the example agent; both ship in acp_otel._demo.examples) under "
            "opentelemetry-instrument and show "
            "the joined trace of both processes. Without OTEL_EXPORTER_OTLP_ENDPOINT the spans go to an "
            "embedded OTLP receiver on loopback and the trace is printed and written to a file; with it they "
            "go to that endpoint and the trace id is printed."
        ),
    )
    runner.add_arguments(demo)
    demo.set_defaults(handler=_demo)

    proxy = commands.add_parser("proxy", help=PROXY_HELP, description=proxy_options.DESCRIPTION)
    proxy_options.add_arguments(proxy)
    proxy.set_defaults(handler=_proxy)
    return parser


def _proxy_parser() -> argparse.ArgumentParser:
    """The parser of ``acp-otel proxy`` alone: what ``build_parser``'s proxy subcommand parses, lighter."""
    import argparse

    parser = argparse.ArgumentParser(prog="acp-otel proxy", description=proxy_options.DESCRIPTION)
    proxy_options.add_arguments(parser)
    parser.set_defaults(handler=_proxy, command="proxy")
    return parser


def _proxy(args: argparse.Namespace) -> int:
    return _run_proxy(proxy_options.options_from_args(args))


def _run_proxy(options: ProxyOptions) -> int:
    from ._proxy.process import run

    return run(options)


def _demo(args: argparse.Namespace) -> int:
    from ._demo import runner

    return runner.run_demo(runner.options_from_args(args))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``acp-otel`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    # The editor's path: nothing but the proxy's options before the agent starts, and no parser for `-- CMD`.
    plain = proxy_options.plain_command(argv[1:]) if argv[:1] == ["proxy"] else None
    handler: Callable[[], int]
    if plain is not None:
        command, handler = "proxy", lambda: _run_proxy(plain)
    else:
        args = _proxy_parser().parse_args(argv[1:]) if argv[:1] == ["proxy"] else build_parser().parse_args(argv)
        command, handler = args.command, lambda: args.handler(args)
    try:
        return int(handler())
    except KeyboardInterrupt:
        print(f"acp-otel {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from ._demo.runner import DemoError

        if not isinstance(exc, DemoError):
            raise
        print(f"acp-otel {command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
