"""``acp-otel demo`` argument handling and its failure when the spans cannot be exported."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sdk_versions import DEAD_GRPC_ENDPOINT_GIVES_UP, EXAMPLES_IMPORT

from acp_otel import cli
from acp_otel._demo import runner

ACP_OTEL = str(Path(sys.executable).parent / "acp-otel")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def clean_env() -> dict[str, str]:
    """This process's environment without any OpenTelemetry configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("TRACEPARENT", "TRACESTATE")}
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nobody else takes it) but not listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_parser_defaults_are_the_options_defaults() -> None:
    args = cli.build_parser().parse_args(["demo"])
    assert runner.options_from_args(args) == runner.DemoOptions()
    args = cli.build_parser().parse_args(["demo", "--timeout", "5", "--", "--reject"])
    options = runner.options_from_args(args)
    assert options.timeout == 5.0 and options.client_args == ("--reject",)


def test_install_hint_fits_the_installation() -> None:
    """A pipx installation takes packages with pipx inject (pip would install them elsewhere)."""
    home = str(Path.home())
    hint = runner.install_hint("agent-client-protocol", f"{home}/.local/share/pipx/venvs/acp-otel")
    assert hint == "pipx inject acp-otel agent-client-protocol"
    assert runner.install_hint("agent-client-protocol", "/opt/pipx/venvs/acp-otel").startswith("pipx inject acp-otel ")
    hint = runner.install_hint("agent-client-protocol", str(EXAMPLES.parent / ".venv"))
    assert hint == f"{sys.executable} -m pip install agent-client-protocol"


def test_where_to_look_follows_the_endpoint() -> None:
    trace_id = "ab" * 16
    phoenix = runner.where_to_look("http://127.0.0.1:6006", trace_id)
    assert phoenix.startswith("look it up in Phoenix (http://127.0.0.1:6006)") and "project default" in phoenix
    assert "16686" not in phoenix
    named = runner.where_to_look("http://127.0.0.1:6006", trace_id, "a=b, openinference.project.name = mine")
    assert "project mine" in named
    collector = runner.where_to_look("http://otel.example:4318", trace_id)
    assert f"http://otel.example:16686/trace/{trace_id}" in collector and "Tempo" in collector
    assert "http://[::1]:16686/" in runner.where_to_look("http://[::1]:4317", trace_id)
    saas = runner.where_to_look("https://api.example.com/otlp", trace_id)
    assert saas == "look it up by its trace id in the backend behind https://api.example.com"


def test_export_problems_tells_lost_batches_from_retries() -> None:
    stderr = "\n".join(
        [
            "[agent] INFO session started",
            "[client] WARNING Transient error 503 encountered while exporting span batch, retrying in 1.00s.",
            "[client] ERROR Failed to export spans batch due to timeout, max retries or shutdown.",
            "[agent] WARNING Shutdown in progress, aborting retry.",
        ]
    )
    failures, retries = runner.export_problems(stderr)
    assert failures == [
        "[client] ERROR Failed to export spans batch due to timeout, max retries or shutdown.",
        "[agent] WARNING Shutdown in progress, aborting retry.",
    ]
    assert len(retries) == 1
    assert runner.export_problems("[agent] INFO fine\n") == ([], [])


def test_export_problems_reads_a_lost_batch_logged_with_its_traceback() -> None:
    """Up to 1.39 the OTLP/HTTP exporter lets a connection error escape; the batch processor logs it with a
    traceback (as here, from 1.27): one failure, named by the exception the traceback ends with."""
    stderr = "\n".join(
        [
            "[client] ERROR Exception while exporting Span batch.",
            "Traceback (most recent call last):",
            '  File "urllib3/connection.py", line 239, in _new_conn',
            "    sock = connection.create_connection(",
            "ConnectionRefusedError: [Errno 111] Connection refused",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "requests/adapters.py", line 696, in send',
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded",
            "[agent] INFO new session sess-1 in /tmp",
        ]
    )
    failures, retries = runner.export_problems(stderr)
    assert failures == [
        "[client] ERROR Exception while exporting Span batch: requests.exceptions.ConnectionError: "
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded"
    ]
    assert retries == []


@EXAMPLES_IMPORT
@pytest.mark.e2e
@pytest.mark.timeout(90)
@pytest.mark.parametrize("protocol", ["http/protobuf", pytest.param("grpc", marks=DEAD_GRPC_ENDPOINT_GIVES_UP)])
def test_demo_fails_when_nothing_can_be_exported(closed_port: int, tmp_path: Path, protocol: str) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"
    env = clean_env()
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            # Give up quickly instead of retrying for the default 10 s per batch.
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
        }
    )
    done = subprocess.run(
        [ACP_OTEL, "demo", "--examples", str(EXAMPLES)],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # The client itself ran fine; only the export failed.
    assert "[stop] end_turn" in done.stdout
    assert "trace id:" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("acp-otel demo: error:")]
    assert len(errors) == 1, done.stderr
    assert f"spans were not exported to {endpoint}" in errors[0]
    # the exporter's own words (their wording differs between releases)
    assert "Failed to export" in errors[0] or "Exception while exporting" in errors[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / runner.DEFAULT_OUTPUT).exists()


def test_demo_runs_the_examples_shipped_in_the_package() -> None:
    # The demo needs no source checkout: by default it runs the copies inside the installed package.
    packaged = runner.find_examples()
    assert packaged == (Path(runner.__file__).resolve().parent / "examples")
    assert (packaged / "README.md").is_file()  # the file the example client attaches to its prompt
    # The repository's examples/ holds links to those files, not a second copy to keep in step.
    # (Compared with the source tree's package: in the matrix the package under test is an installed copy.)
    source_copies = EXAMPLES.parent / "acp_otel" / "_demo" / "examples"
    for name in ("client.py", "agent.py", "README.md"):
        assert (EXAMPLES / name).resolve() == source_copies / name, name
    with pytest.raises(runner.DemoError, match="were not found"):
        runner.find_examples(EXAMPLES / "nowhere")


@EXAMPLES_IMPORT
@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_demo_explains_its_trace_and_the_next_step(tmp_path: Path) -> None:
    done = subprocess.run(
        [ACP_OTEL, "demo", "--color", "never", "--output", str(tmp_path / "t.json")],
        env=clean_env(),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tail = done.stdout.split("wrote ", 1)[1]  # after the waterfall
    assert "'acp-otel demo' is the demo's own root span" in tail
    assert "initialize includes starting the agent's process" in tail
    assert "opentelemetry-instrument python" in tail and "acp-otel proxy -- YOUR AGENT COMMAND" in tail
