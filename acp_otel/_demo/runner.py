"""``acp-otel demo``: run the example client and agent, both traced, and show the joined trace.

The example client (``client.py`` of :mod:`acp_otel._demo.examples`, shipped in the package; the
repository's ``examples/`` links to it) runs in a subprocess under ``opentelemetry-instrument``
with service name ``acp-example-client`` and exports OTLP/HTTP; it spawns the example agent through
the SDK, and acp-otel hands the agent the OpenTelemetry configuration with service name ``agent``
(derived from ``python .../agent.py``). The client runs inside one root span ``acp-otel demo``
(see :mod:`acp_otel._demo.traced_client`), so the whole run is one trace.

* Without ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``), both processes export to an
  embedded OTLP receiver on a free loopback port; the trace is printed as a waterfall with a summary
  line and written to an OTLP JSON file (the Collector file exporter's format).
* With an endpoint set, they export there (``http/protobuf`` unless ``OTEL_EXPORTER_OTLP_PROTOCOL``
  says otherwise) and the trace id is printed, to look up in Jaeger or Tempo. The demo cannot see that
  endpoint's side, so it reads the client's stderr (which carries the agent's too): if the OTLP exporters
  report a lost batch (nothing listening, wrong protocol for the port, ...) the demo fails instead.

Failures end with a one-line message on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

CLIENT_SERVICE_NAME = "acp-example-client"
DEFAULT_OUTPUT = "acp-otel-demo-trace.json"
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# Lines of the example client's output shown in the excerpt (it tags every line, see examples/README.md).
EXCERPT_TAGS = ("[init]", "[session]", "[prompt]", "[permission]", "[fs]", "[ext]", "[notify]", "[stop]")
EXCERPT_FALLBACK_LINES = 12
# What the OTLP exporters (HTTP and gRPC) log when a batch is finally lost; "Transient error" lines are
# retries that may still succeed. Up to 1.39 the HTTP exporter lets a connection error escape, which the
# batch processor logs as "Exception while exporting Span batch." with a traceback.
EXPORT_FAILURE_MARKERS = ("Failed to export", "aborting retry", "Exception while exporting")
EXPORT_RETRY_MARKER = "Transient error"
# The lines of a traceback after its log line, and the one that names the exception (its last such line).
_TRACEBACK_LINE = re.compile(r"^(?:\s|Traceback \(most recent call last\):|The above exception|During handling|$)")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Timeout)\b(?::.*)?$")
PACKAGED_EXAMPLES = Path(__file__).resolve().parent / "examples"
ABOUT_LINES = (
    "what you see:",
    "  · 'acp-otel demo' is the demo's own root span around the whole run, so that both processes' spans form "
    "one trace (an editor's spans have roots of their own)",
    "  · the client's initialize includes starting the agent's process: the agent answers once it is up",
    "next, trace your own agent:",
    "  · a Python client or agent on the ACP SDK: opentelemetry-instrument python your_client.py "
    "(the agents it spawns are traced too)",
    "  · any editor and agent: make the editor start `acp-otel proxy -- YOUR AGENT COMMAND`, with "
    "OTEL_EXPORTER_OTLP_ENDPOINT set to your collector",
)


PROXY_ABOUT_LINE = (
    "  · agent-proxy is acp-otel proxy in front of the (untraced) example agent: its spans are what an editor's "
    "agent command `acp-otel proxy -- AGENT` gives"
)


def print_about(out: TextIO, proxy: bool = False) -> None:
    """What the trace shows that the demo made up or that surprises, and what to do next."""
    print(file=out)
    for line in ABOUT_LINES:
        print(line, file=out)
        if proxy and line == ABOUT_LINES[2]:
            print(PROXY_ABOUT_LINE, file=out)


class DemoError(Exception):
    """A problem the user can fix; its message is printed without a traceback."""


@dataclass(frozen=True)
class DemoOptions:
    """What ``acp-otel demo`` was asked to do."""

    output: Path = Path(DEFAULT_OUTPUT)
    examples: Path | None = None
    width: int | None = None
    color: str = "auto"
    timeout: float = 60.0
    client_args: tuple[str, ...] = ()
    proxy: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``demo`` subcommand's options on ``parser`` (defaults: those of :class:`DemoOptions`)."""
    defaults = DemoOptions()
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=defaults.output,
        help="OTLP JSON file for the trace (embedded receiver only; default: %(default)s)",
    )
    parser.add_argument(
        "--examples",
        type=Path,
        default=defaults.examples,
        help="directory with client.py and agent.py (default: the examples shipped in acp_otel._demo.examples)",
    )
    parser.add_argument("--width", type=int, default=defaults.width, help="waterfall width (default: terminal width)")
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=defaults.color,
        help="ANSI colors (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout", type=float, default=defaults.timeout, help="seconds the client may run (default: %(default)s)"
    )
    parser.add_argument(
        "--proxy",
        action="store_true",
        help="start the agent as an editor would with acp-otel proxy: `acp-otel proxy -- python agent.py`",
    )
    parser.add_argument(
        "client_args", nargs=argparse.REMAINDER, help="arguments for the example client, after -- (e.g. -- --reject)"
    )


def options_from_args(args: argparse.Namespace) -> DemoOptions:
    """Build :class:`DemoOptions` from parsed ``demo`` arguments."""
    client_args = list(args.client_args)
    if client_args[:1] == ["--"]:
        client_args = client_args[1:]
    return DemoOptions(
        output=args.output,
        examples=args.examples,
        width=args.width,
        color=args.color,
        timeout=args.timeout,
        client_args=tuple(client_args),
        proxy=args.proxy,
    )


def behind_proxy(client_args: tuple[str, ...], examples: Path) -> tuple[str, ...]:
    """The example client's arguments with its agent command (``-- CMD``, or the example agent) behind the
    proxy: ``-- python -m acp_otel.cli proxy -- CMD`` (this Python, so the installed acp-otel is used)."""
    proxy = (sys.executable, "-m", "acp_otel.cli", "proxy", "--")
    if "--" in client_args:
        split = client_args.index("--")
        return (*client_args[: split + 1], *proxy, *client_args[split + 1 :])
    return (*client_args, "--", *proxy, sys.executable, str(examples / "agent.py"))


# ------------------------------------------------------------------ checks


def find_examples(explicit: Path | None = None) -> Path:
    """The directory holding the example ``client.py`` and ``agent.py``; :class:`DemoError` if absent.

    By default the copies shipped in the package (:mod:`acp_otel._demo.examples`), so the demo runs from
    a plain ``pip install`` as from a source checkout.
    """
    candidate = explicit if explicit is not None else PACKAGED_EXAMPLES
    if (candidate / "client.py").is_file() and (candidate / "agent.py").is_file():
        return candidate.resolve()
    raise DemoError(
        f"the example client and agent were not found (looked for client.py and agent.py in {candidate})"
        + ("" if explicit is not None else "; the acp-otel installation is incomplete, reinstall it")
    )


def find_opentelemetry_instrument() -> str:
    """The ``opentelemetry-instrument`` next to this Python, else on ``PATH``; :class:`DemoError` if absent."""
    here = Path(sys.executable).parent
    for name in ("opentelemetry-instrument", "opentelemetry-instrument.exe"):
        if (here / name).is_file():
            return str(here / name)
    found = shutil.which("opentelemetry-instrument")
    if found:
        return found
    raise DemoError(
        "opentelemetry-instrument was not found (it comes with opentelemetry-instrumentation, a dependency of "
        "acp-otel): " + install_hint("opentelemetry-instrumentation")
    )


def install_hint(package: str, prefix: str | None = None) -> str:
    """The command that installs ``package`` beside acp-otel: ``pipx inject acp-otel …`` when acp-otel runs in
    a pipx environment (``prefix``, default ``sys.prefix``: ``…/pipx/venvs/acp-otel``), else this Python's pip."""
    parts = Path(prefix if prefix is not None else sys.prefix).parts
    if len(parts) >= 3 and parts[-3] == "pipx" and parts[-2] == "venvs":
        return f"pipx inject {parts[-1]} {package}"
    return f"{sys.executable} -m pip install {package}"


def check_requirements() -> None:
    """Fail early and clearly when the ACP SDK or the OTLP exporter is missing."""
    if importlib.util.find_spec("acp") is None:
        raise DemoError(
            "the ACP Python SDK is not installed (import acp failed): " + install_hint("agent-client-protocol")
        )
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None:
        raise DemoError("the OTLP/HTTP exporter is not installed: " + install_hint("opentelemetry-exporter-otlp"))


# ------------------------------------------------------------------ running


@dataclass
class ClientRun:
    """The example client's exit status, output and the demo trace id."""

    returncode: int
    stdout: str
    stderr: str
    trace_id: str
    seconds: float


def client_environment(base: dict[str, str], exporter_env: dict[str, str] | None) -> dict[str, str]:
    """The client process's environment: ``base`` plus the demo's OpenTelemetry settings.

    ``exporter_env`` (the embedded receiver's) overrides endpoint and protocol; without it the caller's
    endpoint is kept and the protocol defaults to ``http/protobuf``.
    """
    env = dict(base)
    env.pop("OTEL_SDK_DISABLED", None)
    env.update(
        {
            "OTEL_SERVICE_NAME": CLIENT_SERVICE_NAME,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
    )
    if exporter_env is not None:
        env.update(exporter_env)
        env["OTEL_TRACES_SAMPLER"] = "parentbased_always_on"
    elif "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in env:
        env.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    return env


def run_client(
    instrument: str,
    examples: Path,
    env: dict[str, str],
    client_args: tuple[str, ...],
    timeout: float,
) -> ClientRun:
    """Run ``client.py`` from ``examples`` under ``instrument`` (``opentelemetry-instrument``) inside the demo's
    root span, in the caller's working directory (the session's ``cwd``)."""
    with tempfile.TemporaryDirectory(prefix="acp-otel-demo-") as tmp:
        trace_id_file = Path(tmp) / "trace-id"
        command = [
            instrument,
            sys.executable,
            "-m",
            "acp_otel._demo.traced_client",
            "--client",
            str(examples / "client.py"),
            "--trace-id-file",
            str(trace_id_file),
            "--",
            *client_args,
        ]
        started = time.monotonic()
        try:
            done = subprocess.run(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise DemoError(f"the example client did not finish within {timeout:g} s") from exc
        except OSError as exc:
            raise DemoError(f"could not start {instrument}: {exc}") from exc
        seconds = time.monotonic() - started
        trace_id = trace_id_file.read_text(encoding="utf-8").strip() if trace_id_file.exists() else ""
    return ClientRun(done.returncode, done.stdout, done.stderr, trace_id, seconds)


def excerpt(stdout: str, width: int) -> list[str]:
    """The lines of the client's output worth showing (tagged milestones), cut to ``width``."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    picked = [line for line in lines if line.startswith(EXCERPT_TAGS)] or lines[:EXCERPT_FALLBACK_LINES]
    return [line if len(line) <= width - 2 else line[: width - 3] + "…" for line in picked]


def _tail(text: str, lines: int = 15) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "\n".join("  " + line for line in kept)


def _use_color(mode: str, stream: TextIO) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def run_demo(options: DemoOptions, out: TextIO | None = None) -> int:
    """Run the demo; print to ``out`` (default stdout). Raises :class:`DemoError` on failure."""
    out = out or sys.stdout
    check_requirements()
    examples = find_examples(options.examples)
    instrument = find_opentelemetry_instrument()
    width = options.width or min(shutil.get_terminal_size((110, 24)).columns, 140)
    color = _use_color(options.color, out)
    if options.proxy:
        options = replace(options, client_args=behind_proxy(options.client_args, examples))
    endpoint = next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)
    if endpoint is not None:
        return _run_with_endpoint(options, instrument, examples, endpoint, width, out)
    return _run_with_receiver(options, instrument, examples, width, color, out)


def _print_client_output(run: ClientRun, width: int, out: TextIO) -> None:
    lines = excerpt(run.stdout, width)
    if lines:
        print(f"example client output (excerpt), {run.seconds:.1f} s:", file=out)
        for line in lines:
            print(f"  {line}", file=out)
        print(file=out)


def _check_client(run: ClientRun) -> None:
    if run.returncode != 0:
        detail = _tail(run.stderr) or "  (no output on stderr)"
        raise DemoError(f"the example client failed with exit status {run.returncode}; its stderr ends with:\n{detail}")
    if not run.trace_id or set(run.trace_id) == {"0"}:
        raise DemoError(
            "the example client ran but was not traced (no valid trace id): is the OpenTelemetry SDK "
            "configured by opentelemetry-instrument (opentelemetry-distro installed)?"
        )


def export_problems(stderr: str) -> tuple[list[str], list[str]]:
    """The exporters' log lines in ``stderr`` of lost batches and of retries (which may have succeeded).

    A lost batch logged with a traceback is one line: the log line and the exception the traceback ends with.
    """
    lines = stderr.splitlines()
    failures: list[str] = []
    for index, line in enumerate(lines):
        if any(marker in line for marker in EXPORT_FAILURE_MARKERS):
            below = _exception_below(lines, index + 1)
            failures.append(line.strip().rstrip(".") + below if below else line.strip())
    retries = [line.strip() for line in lines if EXPORT_RETRY_MARKER in line]
    return failures, retries


def _exception_below(lines: list[str], start: int) -> str:
    """``": <exception line>"`` when a traceback follows ``lines[start - 1]``, else nothing."""
    if start >= len(lines) or not lines[start].startswith("Traceback"):
        return ""
    named = ""
    for line in lines[start:]:
        if _EXCEPTION_LINE.match(line):
            named = line.strip()
        elif not _TRACEBACK_LINE.match(line):
            break
    return f": {named}" if named else ""


def _check_export(run: ClientRun, endpoint: str, err: TextIO) -> None:
    failures, retries = export_problems(run.stderr)
    if failures:
        first = failures[0] if len(failures[0]) <= 300 else failures[0][:299] + "…"
        raise DemoError(
            f"spans were not exported to {endpoint} (is a collector listening there, with the right "
            f"OTEL_EXPORTER_OTLP_PROTOCOL?); {len(failures)} exporter error(s), the first: {first}"
        )
    if retries:
        print(
            f"acp-otel demo: warning: the exporter had to retry {len(retries)} time(s) sending to {endpoint}; "
            "the trace may be incomplete",
            file=err,
        )


def _run_with_endpoint(
    options: DemoOptions, instrument: str, examples: Path, endpoint: str, width: int, out: TextIO
) -> int:
    env = client_environment(dict(os.environ), None)
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    print(f"acp-otel demo: example client and agent, exporting OTLP ({protocol}) to {endpoint}", file=out)
    print(file=out)
    run = run_client(instrument, examples, env, options.client_args, options.timeout)
    _check_client(run)
    _print_client_output(run, width, out)
    # Exporting happens in the background and a failure does not change the client's exit status: the
    # exporters only log it (to the client's stderr, which also carries the agent's).
    _check_export(run, endpoint, sys.stderr)
    print(f"trace id: {run.trace_id}", file=out)
    print(where_to_look(endpoint, run.trace_id, os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")), file=out)
    print_about(out, options.proxy)
    return 0


PHOENIX_PORT = 6006  # Phoenix's UI and OTLP/HTTP port (its OTLP/gRPC port is the standard 4317)
OTLP_PORTS = (4317, 4318)  # a Collector's, or a backend's own OTLP receiver (Jaeger, Tempo, ...)


def where_to_look(endpoint: str, trace_id: str, resource_attributes: str = "") -> str:
    """Where to find the trace, for the backend the endpoint points at: Phoenix by its port, a Collector or an
    OTLP receiver by the OTLP ports (Jaeger's or Grafana's UI on the same host), otherwise the trace id alone."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "localhost"
    host = f"[{host}]" if ":" in host else host
    if port == PHOENIX_PORT:
        project = "default"
        for item in resource_attributes.split(","):
            key, _, value = item.partition("=")
            if key.strip() == "openinference.project.name" and value.strip():
                project = value.strip()
        return f"look it up in Phoenix ({parts.scheme}://{host}:{port}): project {project}, its traces"
    if port in OTLP_PORTS:
        return (
            f"look it up in Jaeger (http://{host}:16686/trace/{trace_id}) or in Grafana "
            "(Explore → Tempo → query type Search or TraceQL → the trace id), wherever your collector sends it"
        )
    return f"look it up by its trace id in the backend behind {parts.scheme}://{parts.netloc}"


def _run_with_receiver(
    options: DemoOptions, instrument: str, examples: Path, width: int, color: bool, out: TextIO
) -> int:
    from acp_otel._demo.otlp_json import write_otlp_json
    from acp_otel._demo.receiver import OtlpReceiver, ReceivedSpan
    from acp_otel._demo.waterfall import render_waterfall, summary_line

    with OtlpReceiver() as receiver:
        print(
            f"acp-otel demo: example client and agent, exporting OTLP/HTTP to an embedded receiver at "
            f"{receiver.http_endpoint}",
            file=out,
        )
        print(file=out)
        env = client_environment(dict(os.environ), receiver.exporter_env())
        run = run_client(instrument, examples, env, options.client_args, options.timeout)
        _check_client(run)
        _print_client_output(run, width, out)

        def complete(spans: list[ReceivedSpan]) -> bool:
            mine = [s for s in spans if s.trace_id == run.trace_id]
            return any(not s.parent_span_id for s in mine) and len({s.service_name for s in mine}) >= 2

        try:
            receiver.wait_for(complete, timeout=10.0)
        except TimeoutError:
            pass
        spans = receiver.spans(run.trace_id)
        if not spans:
            raise DemoError(
                f"no spans arrived at the embedded receiver for trace {run.trace_id} "
                f"(received {len(receiver.spans())} spans in all)"
            )
        print(render_waterfall(spans, width=width, color=color), file=out)
        print(file=out)
        print(summary_line(spans), file=out)
        try:
            written = write_otlp_json(receiver.resource_spans(), options.output, trace_id=run.trace_id)
        except OSError as exc:
            raise DemoError(f"could not write {options.output}: {exc}") from exc
        print(
            f"wrote {written} spans to {options.output} (OTLP JSON, as the Collector's file exporter writes)", file=out
        )
        services = {s.service_name for s in spans}
        if CLIENT_SERVICE_NAME not in services or len(services) < 2:
            raise DemoError(
                "the agent's spans did not arrive (services seen: "
                f"{', '.join(sorted(services))}); is OTEL_PYTHON_ACP_PROPAGATE_ENV set to false?"
            )
    print_about(out, options.proxy)
    return 0
