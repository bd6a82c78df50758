"""End to end across processes: real client and agent processes exporting real OTLP to a loopback receiver.

Every test here starts Python processes under ``opentelemetry-instrument`` (the way users run them, with
opentelemetry-distro configuring the SDK from ``OTEL_*`` variables) and asserts on what arrived at the
embedded :class:`~acp_otel._demo.receiver.OtlpReceiver` over OTLP/HTTP or OTLP/gRPC.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from otlp_grpc_receiver import GrpcOtlpReceiver
from sdk_sdist import DOWNLOAD_TIMEOUT, fetch_sdist
from sdk_versions import (
    CHILDREN_OUTSIDE_SPAWN_AUTO_INSTRUMENTED,
    EXAMPLES_IMPORT,
    PROMPT_SPAN_ENDS_BEFORE_RESPONSE,
    sdk_matches,
)
from spans import find, one

from acp_otel._demo.otlp_json import read_otlp_json
from acp_otel._demo.receiver import OtlpReceiver, ReceivedSpan
from acp_otel._demo.traced_client import load_client
from acp_otel._shutdown import SIGTERM_NOT_FLUSHED
from acp_otel._spawn import auto_instrumentation_dir, child_environment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
OTEL_INSTRUMENT = str(BIN / "opentelemetry-instrument")
ACP_OTEL = str(BIN / "acp-otel")
CLIENT_SERVICE = "acp-example-client"
AGENT_SERVICE = "agent"  # derived from `python examples/agent.py`


# ------------------------------------------------------------------ helpers


def clean_env() -> dict[str, str]:
    """This process's environment without any OpenTelemetry configuration (the tests add their own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("TRACEPARENT", "TRACESTATE")}
    env.pop("PYTHONPATH", None)
    return env


def otel_env(receiver: OtlpReceiver | GrpcOtlpReceiver, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(receiver.exporter_env())
    env.update(
        {
            "OTEL_SERVICE_NAME": CLIENT_SERVICE,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
    )
    env.update(extra)
    return env


def run_instrumented(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OTEL_INSTRUMENT, sys.executable, *args],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=45,
        **kwargs,
    )


def has_span(name: str, kind: str, service: str | None = None) -> Any:
    return lambda spans: bool(find(spans, name, kind, service))


@pytest.fixture(scope="module")
def sdk_examples() -> Path:
    """The installed SDK release's own ``examples/``, from its source distribution on the package index.

    The SDK ships its examples only in the sdist (DESIGN.md §3); fetching it keeps their code out of this
    repository and tests exactly the release that is installed. The sdist is cached where
    ``scripts/sdk_suite.py`` caches it (``tests/support/sdk_sdist.py``), so CI, which runs that first, has it.
    """
    from importlib.metadata import version

    examples = fetch_sdist(version("agent-client-protocol")) / "examples"
    assert (examples / "client.py").is_file() and (examples / "agent.py").is_file(), examples
    return examples


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcOtlpReceiver]:
    with GrpcOtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def example_client() -> ModuleType:
    """examples/client.py as a module (its ExampleClient answers the example agent's requests)."""
    return load_client(EXAMPLES / "client.py")


async def drive_turn(conn: Any, module: ModuleType) -> Any:
    """initialize, session/new and one session/prompt, as examples/client.py does."""
    from acp import PROTOCOL_VERSION
    from acp.schema import (
        ClientCapabilities,
        FileSystemCapabilities,
        Implementation,
        ResourceContentBlock,
        TextContentBlock,
    )

    await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=False),
            terminal=False,
            field_meta={module.EXT_NAMESPACE: {"buffers": True}},
        ),
        client_info=Implementation(name="e2e-client", version="0.0.1"),
    )
    session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
    readme = (EXAMPLES / "README.md").resolve()
    return await conn.prompt(
        session_id=session.session_id,
        prompt=[
            TextContentBlock(type="text", text="hello"),
            ResourceContentBlock(type="resource_link", uri=readme.as_uri(), name=readme.name),
        ],
    )


# ------------------------------------------------------------------ one turn, two processes, one trace


@EXAMPLES_IMPORT
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_turn_is_one_trace_across_processes(request: pytest.FixtureRequest, protocol: str) -> None:
    # One receiver per transport: spans arriving at it prove the exporters used that transport.
    receiver = request.getfixturevalue("grpc_receiver" if protocol == "grpc" else "receiver")
    done = run_instrumented([str(EXAMPLES / "client.py")], otel_env(receiver))
    assert done.returncode == 0, done.stderr
    spans = receiver.wait_for(has_span("session/prompt", "SERVER", AGENT_SERVICE), timeout=10)

    client_prompt = one(spans, "session/prompt", "CLIENT", CLIENT_SERVICE)
    server_prompt = one(spans, "session/prompt", "SERVER", AGENT_SERVICE)
    assert server_prompt.parent_span_id == client_prompt.span_id  # client -> agent request
    turn = [s for s in spans if s.trace_id == client_prompt.trace_id]
    ids = {s.span_id: s for s in turn}

    # Every span of the turn is a descendant of the client's session/prompt span, in one trace.
    def root_of(span: ReceivedSpan) -> ReceivedSpan:
        while span.parent_span_id in ids:
            span = ids[span.parent_span_id]
        return span

    assert {root_of(s).span_id for s in turn} == {client_prompt.span_id}
    assert {s.service_name for s in turn} == {CLIENT_SERVICE, AGENT_SERVICE}

    # agent -> client requests (standard and extension) cross the boundary back.
    # The agent's tool calls: one span each across both processes, under the agent's turn.
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in turn if s.name.startswith("execute_tool")}
    assert len(tools) == len([s for s in turn if s.name.startswith("execute_tool")])
    assert {"tool-search", "tool-fetch", "tool-read"} <= set(tools)
    assert all(t.service_name == AGENT_SERVICE and t.parent_span_id == server_prompt.span_id for t in tools.values())
    for method in ("session/request_permission", "fs/read_text_file", "_example.com/workspace/buffers"):
        out = one(turn, method, "CLIENT", AGENT_SERVICE)
        inc = one(turn, method, "SERVER", CLIENT_SERVICE)
        # the permission request sits under the tool call it asks about, the file read under the tool call it
        # serves (the one open)
        under = server_prompt if method.startswith("_") else tools["tool-read"]
        assert out.parent_span_id == under.span_id
        assert inc.parent_span_id == out.span_id
    # session/update inside the turn: no spans by default (counted on the turn); other notifications keep theirs.
    if sdk_matches(">=0.12.1"):
        # Before 0.12.1 the SDK may run the last session/update handler after the prompt's response, when the
        # turn has ended: that update then has spans of its own (seen on 0.9.0).
        assert not find(turn, "session/update")
    assert server_prompt.attributes["acp.turn.agent_message_chunk.count"] > 0
    for method in ("_example.com/progress",):
        producers = find(turn, method, "PRODUCER", AGENT_SERVICE)
        consumers = find(turn, method, "CONSUMER", CLIENT_SERVICE)
        assert producers and len(producers) == len(consumers)
        assert {c.parent_span_id for c in consumers} == {p.span_id for p in producers}
        assert all(p.parent_span_id == server_prompt.span_id for p in producers)

    # The spawn span: the agent's pid, its executable, no command line without content capture.
    spawn = one(spans, "acp.spawn", "INTERNAL", CLIENT_SERVICE)
    assert isinstance(spawn.attributes["process.pid"], int) and spawn.attributes["process.pid"] > 0
    assert spawn.attributes["process.executable.name"] == Path(sys.executable).name
    assert "process.command_args" not in spawn.attributes


@EXAMPLES_IMPORT
def test_propagate_env_false_agent_exports_nothing(receiver: OtlpReceiver) -> None:
    env = otel_env(receiver, OTEL_PYTHON_ACP_PROPAGATE_ENV="false")
    done = run_instrumented([str(EXAMPLES / "client.py")], env)
    assert done.returncode == 0, done.stderr
    receiver.wait_for(has_span("session/prompt", "CLIENT", CLIENT_SERVICE), timeout=10)
    time.sleep(0.3)  # both processes have exited; nothing else should be on its way
    spans = receiver.spans()
    assert {s.service_name for s in spans} == {CLIENT_SERVICE}
    assert find(spans, "acp.spawn", "INTERNAL")  # the spawn is still traced, only the environment is not passed
    assert not find(spans, "session/prompt", "SERVER")


# ------------------------------------------------------------------ spawning from an instrumented process


async def test_spawned_agent_environment(instrument: Any, exporter: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a spawned process gets: OTEL_*, the sitecustomize dir, its service name, TRACEPARENT; env= wins."""
    from acp.transports import spawn_stdio_transport

    sitecustomize = auto_instrumentation_dir()
    assert sitecustomize is not None
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([sitecustomize, "/somewhere/else"]))
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "the-editor")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=the-editor,deployment.environment=test")
    monkeypatch.setenv("UNRELATED_SECRET", "not-for-children")
    dump = "import json, os, sys; sys.stdout.write(json.dumps(dict(os.environ)) + '\\n')"

    async def child_env(**kwargs: Any) -> tuple[dict[str, str], int]:
        async with spawn_stdio_transport(sys.executable, "-c", dump, **kwargs) as (reader, _writer, process):
            line = await asyncio.wait_for(reader.readline(), 15)
            await process.wait()
            return json.loads(line), process.pid

    env, pid = await child_env()
    spawn = [s for s in exporter.get_finished_spans() if s.name == "acp.spawn"][-1]
    ctx = spawn.get_span_context()
    assert env["TRACEPARENT"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")  # flags: sampled (+random)
    assert spawn.attributes["process.pid"] == pid
    assert env["PYTHONPATH"] == sitecustomize  # only the auto-instrumentation entry
    assert env["OTEL_TRACES_EXPORTER"] == "none"
    # `python -c ...` has no script: the interpreter's own name (python, python3.11, ...)
    assert env["OTEL_SERVICE_NAME"] == os.path.basename(sys.executable)
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment=test"
    assert "UNRELATED_SECRET" not in env

    env, _ = await child_env(env={"OTEL_SERVICE_NAME": "explicit", "PYTHONPATH": "/mine", "TRACEPARENT": "x"})
    assert env["OTEL_SERVICE_NAME"] == "explicit" and env["PYTHONPATH"] == "/mine" and env["TRACEPARENT"] == "x"

    instrument(propagate_env=False)
    env, _ = await child_env()
    assert not [k for k in env if k.startswith("OTEL_") or k in ("TRACEPARENT", "PYTHONPATH")]


def test_auto_instrumentation_found_without_pythonpath() -> None:
    """opentelemetry-instrument 0.48b0 to 0.62b1 take their sitecustomize directory off PYTHONPATH as they start:
    the directory is still found through the loaded sitecustomize module or the import path, so the child of an
    auto-instrumented client gets it; a process that runs without it passes none on."""
    site = auto_instrumentation_dir()
    assert site is not None
    parent = {"OTEL_TRACES_EXPORTER": "otlp", "PYTHONPATH": "/app"}  # what such a release leaves behind
    elsewhere = os.path.join(os.path.dirname(site), "elsewhere", "sitecustomize.py")
    for import_path, module in (([site, "/app"], elsewhere), (["/app"], os.path.join(site, "sitecustomize.py"))):
        env = child_environment(sys.executable, ["agent.py"], None, parent, {}, site, None, import_path, module)
        assert env["PYTHONPATH"] == site
    env = child_environment(sys.executable, ["agent.py"], None, parent, {}, site, None, ["/app"], elsewhere)
    assert "PYTHONPATH" not in env


@EXAMPLES_IMPORT
async def test_explicit_service_name_wins(
    instrument: Any,
    exporter: Any,
    receiver: OtlpReceiver,
    example_client: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An instrumented client spawns the example agent twice: derived name, then the caller's env= name."""
    from acp import spawn_agent_process

    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    for key, value in receiver.exporter_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("PYTHONPATH", str(auto_instrumentation_dir()))  # as if run by opentelemetry-instrument

    pids = {}
    for name, env in (("agent", None), ("explicit-agent", {"OTEL_SERVICE_NAME": "explicit-agent"})):
        client = example_client.ExampleClient()
        agent = str(EXAMPLES / "agent.py")
        async with spawn_agent_process(
            client, sys.executable, agent, env=env, transport_kwargs={"stderr": subprocess.DEVNULL}
        ) as (conn, process):
            response = await drive_turn(conn, example_client)
            assert response.stop_reason == "end_turn"
            pids[name] = process.pid
        await asyncio.to_thread(receiver.wait_for, has_span("session/prompt", "SERVER", name), 10)

    assert {s.service_name for s in receiver.spans()} == {"agent", "explicit-agent"}
    spawns = [s for s in exporter.get_finished_spans() if s.name == "acp.spawn"]
    assert sorted(s.attributes["process.pid"] for s in spawns) == sorted(pids.values())
    # The agent's spans continue the client's trace (the client runs in this process).
    client_prompts = [
        s for s in exporter.get_finished_spans() if s.attributes.get("acp.method.name") == "session/prompt"
    ]
    server_prompts = find(receiver.spans(), "session/prompt", "SERVER")
    assert {f"{s.get_span_context().span_id:016x}" for s in client_prompts} == {
        s.parent_span_id for s in server_prompts
    }


# ------------------------------------------------------------------ no spans lost when the agent is ended


async def _spawn_plain(command: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=str(ROOT),
    )


@EXAMPLES_IMPORT
@PROMPT_SPAN_ENDS_BEFORE_RESPONSE
async def test_sigterm_right_after_the_turn_loses_no_spans(
    grpc_receiver: GrpcOtlpReceiver, example_client: ModuleType
) -> None:
    """What the SDK's example client does: a turn, then proc.terminate(). Only the SIGTERM flush can deliver
    the agent's spans (the batch processor would wait 60 s); the exit status stays that of SIGTERM.

    The agent relies on opentelemetry-distro's defaults alone (no OTEL_TRACES_EXPORTER, no protocol):
    installing acp-otel without extras is enough for ``opentelemetry-instrument python agent.py`` to export.
    """
    from acp import ClientSideConnection

    env = clean_env()
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint,  # the distro's default protocol is grpc
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_SERVICE_NAME": "terminated-agent",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
        }
    )
    proc = await _spawn_plain([OTEL_INSTRUMENT, sys.executable, str(EXAMPLES / "agent.py")], env)
    assert proc.stdin is not None and proc.stdout is not None
    conn = ClientSideConnection(lambda _agent: example_client.ExampleClient(), proc.stdin, proc.stdout)
    try:
        response = await drive_turn(conn, example_client)
        assert response.stop_reason == "end_turn"
        assert grpc_receiver.spans() == []  # nothing exported yet: the batch delay is 60 s
        proc.terminate()
        returncode = await asyncio.wait_for(proc.wait(), 10)
    finally:
        await conn.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert returncode == -15
    spans = await asyncio.to_thread(grpc_receiver.wait_for, has_span("session/prompt", "SERVER", "terminated-agent"), 5)
    assert {"initialize", "session/new", "session/prompt", "execute_tool search"} <= {
        s.attributes.get("acp.method.name", s.name) for s in spans
    }


@EXAMPLES_IMPORT
async def test_end_of_input_flushes_before_exit(
    receiver: OtlpReceiver, example_client: ModuleType, tmp_path: Path
) -> None:
    """The editor closes the agent's stdin; the agent lingers (slow cleanup). Its spans arrive at once."""
    from acp import ClientSideConnection

    lingering = tmp_path / "lingering_agent.py"
    lingering.write_text(
        "import asyncio, runpy, sys, time\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        f"agent = runpy.run_path({str(EXAMPLES / 'agent.py')!r}, run_name='lingering')\n"
        "asyncio.run(agent['main']())\n"
        "time.sleep(30)  # cleanup that outlives the editor's patience\n",
        encoding="utf-8",
    )
    env = otel_env(receiver, OTEL_SERVICE_NAME="lingering-agent", OTEL_BSP_SCHEDULE_DELAY="60000")
    proc = await _spawn_plain([OTEL_INSTRUMENT, sys.executable, str(lingering)], env)
    assert proc.stdin is not None and proc.stdout is not None
    conn = ClientSideConnection(lambda _agent: example_client.ExampleClient(), proc.stdin, proc.stdout)
    try:
        assert (await drive_turn(conn, example_client)).stop_reason == "end_turn"
        proc.stdin.close()
        spans = await asyncio.to_thread(receiver.wait_for, has_span("session/prompt", "SERVER", "lingering-agent"), 5)
        assert proc.returncode is None  # still running: the flush at end of input delivered them
        assert {"initialize", "session/new", "session/prompt"} <= {
            s.attributes.get("acp.method.name", s.name) for s in spans
        }
    finally:
        await conn.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_distro_and_exporter_come_without_extras() -> None:
    """``pip install acp-otel`` alone brings what ``opentelemetry-instrument python agent.py`` needs to export
    (the test above runs an agent on exactly those defaults)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    plain = {Requirement(r).name for r in requires("acp-otel") or [] if Requirement(r).marker is None}
    assert {"opentelemetry-distro", "opentelemetry-exporter-otlp", "opentelemetry-instrumentation"} <= plain


@pytest.mark.timeout(DOWNLOAD_TIMEOUT + 60)  # the first run on a machine downloads the SDK's sdist
@CHILDREN_OUTSIDE_SPAWN_AUTO_INSTRUMENTED  # that client starts its agent with asyncio, not the SDK's spawn
def test_sdk_example_client_terminates_its_agent(receiver: OtlpReceiver, sdk_examples: Path) -> None:
    """The SDK's own example client and agent, unmodified: one line, EOF, then it terminates the agent."""
    source = (sdk_examples / "client.py").read_text()
    assert "terminate()" in source, "this SDK's example client no longer terminates its agent"
    env = otel_env(receiver, OTEL_SERVICE_NAME="sdk-example", OTEL_BSP_SCHEDULE_DELAY="60000")
    for _ in range(3):
        done = run_instrumented(
            [str(sdk_examples / "client.py"), str(sdk_examples / "agent.py")], env, input="Hello, agent\n"
        )
        assert done.returncode == 0, done.stderr
        assert "| Agent: Hello, agent" in done.stdout
        # The flush after SIGTERM is bounded (1 s, below the editors' grace): on a machine too loaded for that,
        # the agent says so on stderr, and the run is tried again; any other loss fails.
        if SIGTERM_NOT_FLUSHED.strip() not in done.stderr:
            break
    # That client starts the agent itself (full environment): both are "sdk-example"; the agent's side is
    # the SERVER of session/prompt, which only the SIGTERM flush could deliver.
    spans = receiver.wait_for(has_span("session/prompt", "SERVER"), timeout=5)
    server = one(spans, "session/prompt", "SERVER")
    (client,) = [s for s in spans if s.span_id == server.parent_span_id and s.name.startswith("session/prompt")]
    assert client.kind == "CLIENT"
    assert server.resource_attributes != {} and server.service_name == "sdk-example"


# ------------------------------------------------------------------ the demo command


@pytest.fixture
def demo_finds_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip unless the installed package finds the examples from outside the repository (as the demo does when
    run from anywhere): a non-editable install that does not ship them cannot run the demo."""
    from acp_otel._demo import runner

    monkeypatch.chdir(tmp_path)
    try:
        runner.find_examples()
    except runner.DemoError as exc:
        pytest.skip(f"this install of acp_otel has no examples for the demo: {exc}")


@EXAMPLES_IMPORT
@pytest.mark.usefixtures("demo_finds_examples")
def test_demo_with_embedded_receiver(tmp_path: Path) -> None:
    output = tmp_path / "trace.json"
    done = subprocess.run(
        [ACP_OTEL, "demo", "--output", str(output), "--color", "never", "--width", "100"],
        env=clean_env(),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "acp-otel demo" in out and "\x1b[" not in out
    assert f"2 services ({CLIENT_SERVICE}, {AGENT_SERVICE})" in out
    assert "session/prompt" in out and "acp.spawn" in out and "[stop] end_turn" in out
    spans = read_otlp_json(output)
    assert len({s.trace_id for s in spans}) == 1
    assert {s.service_name for s in spans} == {CLIENT_SERVICE, AGENT_SERVICE}
    assert f"trace {spans[0].trace_id}" in out
    roots = [s for s in spans if not s.parent_span_id]
    assert [r.name for r in roots] == ["acp-otel demo"]
    for name in ("initialize", "session/new", "session/prompt"):
        assert one(spans, name, "SERVER", AGENT_SERVICE)
    line = output.read_text(encoding="utf-8").splitlines()[0]
    assert json.loads(line)["resourceSpans"]


@EXAMPLES_IMPORT
@pytest.mark.usefixtures("demo_finds_examples")
def test_demo_through_the_proxy(tmp_path: Path) -> None:
    """``acp-otel demo --proxy``: the example agent started behind ``acp-otel proxy``, as an editor's agent
    command would; the proxy's spans (its own service, tool spans for the untraced agent) join the trace."""
    output = tmp_path / "trace.json"
    done = subprocess.run(
        [ACP_OTEL, "demo", "--proxy", "--output", str(output), "--color", "never"],
        env=clean_env(),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    spans = read_otlp_json(output)
    assert len({s.trace_id for s in spans}) == 1
    assert {s.service_name for s in spans} == {CLIENT_SERVICE, "agent-proxy"}  # the example agent is untraced
    prompt = one(spans, "session/prompt example-agent", "CLIENT", "agent-proxy")
    tools = [s for s in spans if s.name.startswith("execute_tool") and s.parent_span_id == prompt.span_id]
    assert {s.service_name for s in tools} == {"agent-proxy"} and len(tools) == 3
    assert "agent-proxy is acp-otel proxy" in done.stdout


@EXAMPLES_IMPORT
@pytest.mark.usefixtures("demo_finds_examples")
def test_demo_with_endpoint_prints_the_trace_id(receiver: OtlpReceiver, tmp_path: Path) -> None:
    env = clean_env()
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.http_endpoint
    done = subprocess.run([ACP_OTEL, "demo"], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=45)
    assert done.returncode == 0, done.stdout + done.stderr
    trace_id = next(line.split()[-1] for line in done.stdout.splitlines() if line.startswith("trace id:"))
    spans = receiver.wait_for(lambda spans: len({s.service_name for s in spans}) == 2, timeout=10)
    assert {s.trace_id for s in spans} == {trace_id}
    assert not (tmp_path / "acp-otel-demo-trace.json").exists()
    # where to look follows the endpoint: this receiver is neither Phoenix nor on an OTLP port, so no UI is named
    assert f"look it up by its trace id in the backend behind {receiver.http_endpoint}" in done.stdout
    assert "16686" not in done.stdout


def test_demo_fails_clearly_without_examples(tmp_path: Path) -> None:
    done = subprocess.run(
        [ACP_OTEL, "demo", "--examples", str(tmp_path / "nowhere")],
        env=clean_env(),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "acp-otel demo: error: the example client and agent were not found" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
