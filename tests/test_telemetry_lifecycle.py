"""Telemetry along editor -> proxy -> agent: what each hop inherits and is called, console exporters kept
off the protocol, and what the proxy says at exit when nothing could be exported (real processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exit_clock import ExitClock
from harness import base_env
from otlp_grpc_receiver import GrpcOtlpReceiver
from otlp_sink import OtlpSink, closed_port
from sdk_versions import DEAD_GRPC_ENDPOINT_GIVES_UP, EXAMPLES_IMPORT

from acp_otel import _child_env as ce
from acp_otel._proxy import process
from acp_otel._spawn import auto_instrumentation_dir, child_environment

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
EXAMPLE_AGENT = str(REPO / "examples" / "agent.py")
STANDIN = str(TESTS / "peers" / "editor_standin.py")
PROXY = [sys.executable, "-m", "acp_otel.cli", "proxy"]
BIN = Path(sys.executable).parent
INSTRUMENT = str(BIN / "opentelemetry-instrument")
PROXY_LINE = re.compile(r"^acp-otel proxy: ", re.MULTILINE)


def _console_script() -> str:
    """The ``acp-otel`` console script of this environment (beside ``sys.executable``); fails when it is missing
    (``scripts/test.sh`` does not put the environment's bin on PATH: a bare ``acp-otel`` would name nothing)."""
    script = BIN / "acp-otel"
    assert script.is_file(), f"{script} is missing: install the package into this environment (pip install -e .)"
    return str(script)


# ------------------------------------------------------------------ service names and environments


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["node", "/opt/x/node_modules/@zed-industries/claude-agent-acp/dist/index.js"], "claude-agent-acp"),
        (["bash", "-c", "exec npx -y @zed-industries/claude-code-acp@latest"], "claude-code-acp"),
        (["env", "A=1", "uv", "run", "--with", "rich", "kimi", "acp"], "kimi"),
        (["uvx", "kimi-cli", "acp"], "kimi-cli"),
        (["npx", "-y", "@qwen-code/qwen-code", "--acp"], "qwen-code"),
        (["python3", "-m", "kimi_cli.cli", "acp"], "kimi_cli"),
        (["python3", "-m", "acme.agents.coder"], "coder"),
        (["opentelemetry-instrument", "--traces_exporter", "otlp", "python", "agent.py"], "agent"),
        (["acp-otel", "proxy", "--service-name", "x", "--", "python", "agent.py"], "agent-proxy"),
        ([sys.executable, "-m", "acp_otel.cli", "proxy", "--", "node", "dist/agent.js"], "agent-proxy"),
        (["/usr/local/bin/gemini", "--experimental-acp"], "gemini"),
    ],
)
def test_service_names_see_through_wrappers(command: list[str], expected: str) -> None:
    assert ce.service_name_for_command(command[0], command[1:]) == expected


def test_a_node_script_is_named_after_its_package_json(tmp_path: Path) -> None:
    package = tmp_path / "some-dir"
    (package / "dist").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@acme/real-agent"}))
    (package / "dist" / "index.js").write_text("")
    assert ce.service_name_for_command("node", [str(package / "dist" / "index.js")]) == "real-agent"


def _other_python() -> str | None:
    """A Python interpreter of another version than this one (pyenv has 3.10 - 3.13)."""
    mine = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for version in ("3.13", "3.12", "3.10", "3.11"):
        found = shutil.which(f"python{version}")
        if found and f"python{version}" != mine:
            return found
    return None


def test_sitecustomize_only_reaches_the_same_interpreter_and_environment(tmp_path: Path) -> None:
    assert ce.sitecustomize_belongs(sys.executable, ["agent.py"], sys.executable)
    script = tmp_path / "my-agent"
    script.write_text(f"#!{sys.executable}\nprint(1)\n")
    script.chmod(0o755)
    assert ce.sitecustomize_belongs(str(script), [], sys.executable)  # a console script of this environment
    # The proxy is a console script of this very environment: without the proxy check it would get it.
    acp_otel = _console_script()
    assert ce.sitecustomize_belongs(acp_otel, ["demo"], sys.executable)
    assert not ce.sitecustomize_belongs(acp_otel, ["proxy", "--", sys.executable, "a.py"], sys.executable)
    assert not ce.sitecustomize_belongs("node", ["agent.js"], sys.executable)
    other = _other_python()
    if other is not None:
        assert not ce.sitecustomize_belongs(other, ["agent.py"], sys.executable)
    # Another virtual environment of the very same base interpreter is another environment.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    assert not ce.sitecustomize_belongs(str(tmp_path / "venv" / "bin" / "python"), ["a.py"], sys.executable)


def test_editor_to_child_environment() -> None:
    site = auto_instrumentation_dir()
    assert site is not None
    parent = {
        "OTEL_TRACES_EXPORTER": "console,otlp",
        "OTEL_METRICS_EXPORTER": "console",
        "OTEL_SERVICE_NAME": "editor",
        "PYTHONPATH": site,
    }
    env = child_environment(sys.executable, ["agent.py"], None, parent, {}, site)
    assert env["OTEL_TRACES_EXPORTER"] == "otlp" and env["OTEL_METRICS_EXPORTER"] == "none"
    assert env["OTEL_SERVICE_NAME"] == "agent" and env["PYTHONPATH"] == site
    # The proxy: no sitecustomize, no service name (it names itself and its agent).
    acp_otel = _console_script()  # of this environment: sitecustomize would belong to it, but for the proxy check
    env = child_environment(acp_otel, ["demo"], None, parent, {}, site)
    assert env["PYTHONPATH"] == site
    env = child_environment(acp_otel, ["proxy", "--", sys.executable, "agent.py"], None, parent, {}, site)
    assert "PYTHONPATH" not in env and "OTEL_SERVICE_NAME" not in env
    # An agent on another interpreter: no sitecustomize.
    env = child_environment("node", ["agent.js"], None, parent, {}, site)
    assert "PYTHONPATH" not in env
    # Even a caller's explicit console exporter never reaches a stdio child.
    env = child_environment("node", ["agent.js"], {"OTEL_TRACES_EXPORTER": "console"}, parent, {}, site)
    assert env["OTEL_TRACES_EXPORTER"] == "none"


def test_proxy_to_agent_environment(tmp_path: Path) -> None:
    site = auto_instrumentation_dir()
    assert site is not None
    environ = {"OTEL_TRACES_EXPORTER": "console", "PYTHONPATH": os.pathsep.join([site, "/app"]), "HOME": "/h"}
    env = ce.proxy_agent_environment(environ, ["node", "dist/agent.js"])
    assert env == {"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "agent", "PYTHONPATH": "/app", "HOME": "/h"}
    env = ce.proxy_agent_environment(environ, [sys.executable, "agent.py"])
    assert env["PYTHONPATH"] == os.pathsep.join([site, "/app"])  # the same interpreter: kept
    env = ce.proxy_agent_environment({"OTEL_SERVICE_NAME": "mine"}, ["node", "dist/agent.js"])
    assert env["OTEL_SERVICE_NAME"] == "mine"  # the user's name is kept
    env = ce.proxy_agent_environment({"OTEL_RESOURCE_ATTRIBUTES": "service.name=mine"}, ["node", "dist/agent.js"])
    assert "OTEL_SERVICE_NAME" not in env  # also in the resource attributes (OTEL_SERVICE_NAME would win over it)
    # Exporter names are case-insensitive: CONSOLE is a console exporter too.
    env = ce.proxy_agent_environment(
        {"OTEL_TRACES_EXPORTER": "CONSOLE,otlp", "OTEL_METRICS_EXPORTER": " Console ", "OTEL_LOGS_EXPORTER": "console"},
        ["node", "dist/agent.js"],
    )
    assert (env["OTEL_TRACES_EXPORTER"], env["OTEL_METRICS_EXPORTER"], env["OTEL_LOGS_EXPORTER"]) == (
        "otlp",
        "none",
        "none",
    )


# The proxy's exporter configuration as a user gives it for a backend: none of it may reach the agent.
BACKEND = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "https://backend.example:4318",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://backend.example/v1/traces",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "https://backend.example/v1/logs",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "https://backend.example/v1/metrics",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20SECRET",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-key=SECRET",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-key=SECRET",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-key=SECRET",
    "OTEL_EXPORTER_OTLP_CERTIFICATE": "/backend-certs/ca.pem",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/backend-certs/client.key",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/backend-certs/client.pem",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER": "my_provider",
}
GEMINI = ["node", "/opt/node_modules/@google/gemini-cli/bundle/gemini.js", "--acp"]


@pytest.mark.parametrize("receiver", [None, "http://127.0.0.1:4999"], ids=["option-off", "option-on"])
def test_the_backends_settings_never_reach_the_agent(receiver: str | None) -> None:
    """The proxy's endpoints, headers, certificates, client keys and protocol stay with the proxy, whatever the
    option says; the rest of the OpenTelemetry configuration (sampler, resource attributes, batching) crosses."""
    environ = {**BACKEND, "OTEL_TRACES_SAMPLER": "always_on", "OTEL_RESOURCE_ATTRIBUTES": "team=x", "HOME": "/h"}
    env = ce.proxy_agent_environment(environ, ["/usr/bin/opencode", "acp"], telemetry_endpoint=receiver)
    assert not [v for v in env.values() if "SECRET" in v or "backend.example" in v or v.startswith("/backend-certs/")]
    assert env["OTEL_TRACES_SAMPLER"] == "always_on" and env["OTEL_RESOURCE_ATTRIBUTES"] == "team=x"
    assert env["HOME"] == "/h"
    if receiver is None:  # nothing switches an agent's export on (OpenCode's switch is the endpoint alone)
        assert not [k for k in env if k.startswith("OTEL_EXPORTER_")]
    else:
        assert {k: v for k, v in env.items() if k.startswith("OTEL_EXPORTER_")} == {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }


def test_the_agent_telemetry_switches_of_a_known_agent() -> None:
    """With a receiver: the agent's own switches (found from its command), pointed at the receiver, replacing the
    proxy environment's values; content switched off unless the proxy captures content."""
    receiver = "http://127.0.0.1:4999"
    environ = {"GEMINI_TELEMETRY_OTLP_ENDPOINT": "https://backend.example", "GEMINI_TELEMETRY_LOG_PROMPTS": "true"}
    env = ce.proxy_agent_environment(environ, GEMINI, telemetry_endpoint=receiver)
    assert {k: v for k, v in env.items() if k.startswith("GEMINI_")} == {
        "GEMINI_TELEMETRY_ENABLED": "true",
        "GEMINI_TELEMETRY_TARGET": "local",
        "GEMINI_TELEMETRY_OTLP_ENDPOINT": receiver,
        "GEMINI_TELEMETRY_OTLP_PROTOCOL": "http",
        "GEMINI_TELEMETRY_TRACES_ENABLED": "true",
        "GEMINI_TELEMETRY_LOG_PROMPTS": "false",  # its own default is to log prompts
    }
    assert env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] == "NO_CONTENT"
    env = ce.proxy_agent_environment({}, GEMINI, telemetry_endpoint=receiver, capture_content=True)
    assert env["GEMINI_TELEMETRY_LOG_PROMPTS"] == "true"
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" not in env  # left to the agent's own default
    # Known from the package its script belongs to (a path into node_modules), or from a launcher.
    qwen = ["node", "/opt/node_modules/@qwen-code/qwen-code/cli-entry.js", "--acp"]
    assert ce.agent_telemetry_variables(qwen, receiver, False)["QWEN_TELEMETRY_OTLP_ENDPOINT"] == receiver
    assert ce.agent_telemetry_variables(["npx", "-y", "@qwen-code/qwen-code", "--acp"], receiver, False)[
        "QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES"
    ] == ("false")
    claude = ce.agent_telemetry_variables(["npx", "@zed-industries/claude-agent-acp"], receiver, False)
    assert claude["CLAUDE_CODE_ENABLE_TELEMETRY"] == "1" and claude["OTEL_LOG_USER_PROMPTS"] == "0"
    # Its spans leave while the turn runs: its adapter is terminated before its export at exit.
    assert claude["OTEL_TRACES_EXPORT_INTERVAL"] == "1000"
    # Without a receiver, nothing of the kind.
    assert not [k for k in ce.proxy_agent_environment({}, GEMINI) if k.startswith(("GEMINI_", "OTEL_EXPORTER_"))]


def _package(root: Path, name: str, script: str) -> Path:
    directory = root / "node_modules" / name
    directory.mkdir(parents=True)
    (directory / "package.json").write_text(json.dumps({"name": name}))
    (directory / script).write_text("")
    return directory / script


def test_a_known_agents_script_names_its_service_after_the_agent(tmp_path: Path) -> None:
    """Qwen Code runs as ``node …/@qwen-code/qwen-code/cli-entry.js``: its service (and the proxy's) is named after
    the agent, its package, also through an ``env`` wrapper; another package's script keeps its own name."""
    qwen = str(_package(tmp_path, "@qwen-code/qwen-code", "cli-entry.js"))
    for command in (["node", qwen, "--acp"], ["env", "A=1", "node", qwen, "--acp"]):
        assert ce.service_name_for_command(command[0], command[1:]) == "qwen-code"
        assert ce.proxy_agent_environment({}, command)["OTEL_SERVICE_NAME"] == "qwen-code"
        assert ce.proxy_service_name(command) == "qwen-code-proxy"
        assert ce.command_name(command) == "qwen-code"
    other = str(_package(tmp_path, "some-tool", "cli-entry.js"))
    assert ce.service_name_for_command("node", [other]) == "cli-entry"


def test_an_unknown_agent_gets_the_standard_variables_only() -> None:
    env = ce.agent_telemetry_variables(["/usr/local/bin/my-agent", "--acp"], "http://127.0.0.1:1", False)
    assert env == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT",
    }


@pytest.mark.parametrize("receiver", [False, True], ids=["option-off", "option-on"])
def test_what_the_agent_process_gets_and_what_its_command_sets(tmp_path: Path, receiver: bool) -> None:
    """A real proxy and agent process: the agent's environment (read back from the process) holds none of the
    backend's settings; what the agent's command line sets for it (``env VAR=VALUE agent``) wins over the
    proxy's own choices, the receiver's endpoint included."""
    out = tmp_path / "environ.json"
    dump = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    agent = ["env", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:7777", "MINE=1", sys.executable, "-c", dump]
    env = base_env(**BACKEND, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    if receiver:  # the option as the proxy reads it: nothing to check here if this proxy has no such option
        env["OTEL_PYTHON_ACP_AGENT_TELEMETRY"] = "on"
    done = subprocess.run([*PROXY, "--", *agent], input=b"", capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(out.read_text())
    assert not [
        k for k, v in seen.items() if "SECRET" in v or "backend.example" in v or v.startswith("/backend-certs/")
    ]
    assert seen["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:7777" and seen["MINE"] == "1"


# ------------------------------------------------------------------ console exporters and stdout


@EXAMPLES_IMPORT
@pytest.mark.parametrize("stdio", ["pipes", "sockets"])
async def test_console_exporters_never_reach_a_stdio_agents_stdout(stdio: str) -> None:
    """A zero-code agent told to export spans and metrics to the console: every byte on its stdout is
    protocol, and the spans appear on its stderr instead (not lost). Over pipes, and over a socket as Node
    (libuv) editors give their children (acpx, any Node-based editor)."""
    from acp import ClientSideConnection

    sys.path.insert(0, str(REPO / "examples"))
    try:
        import client as example_client  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    env = base_env(
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
        OTEL_LOGS_EXPORTER="none",
        OTEL_BSP_SCHEDULE_DELAY="50",
        OTEL_METRIC_EXPORT_INTERVAL="100",
    )
    command = [INSTRUMENT, sys.executable, EXAMPLE_AGENT]
    agent_out: asyncio.StreamReader
    agent_in: asyncio.StreamWriter
    kept: list[Any] = []
    if stdio == "pipes":
        pipe = asyncio.subprocess.PIPE
        proc = await asyncio.create_subprocess_exec(*command, stdin=pipe, stdout=pipe, stderr=pipe, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        agent_in, agent_out = proc.stdin, proc.stdout
    else:
        # As libuv does: a socket pair for each of the child's stdin and stdout.
        in_ours, in_theirs = socket.socketpair()
        out_ours, out_theirs = socket.socketpair()
        with in_theirs, out_theirs:
            proc = await asyncio.create_subprocess_exec(
                *command, stdin=in_theirs, stdout=out_theirs, stderr=asyncio.subprocess.PIPE, env=env
            )
        # Both halves kept: a StreamWriter that is collected closes its socket.
        agent_out, out_writer = await asyncio.open_connection(sock=out_ours, limit=2**24)
        in_reader, agent_in = await asyncio.open_connection(sock=in_ours)
        kept.extend([out_writer, in_reader])
    assert proc.stderr is not None
    raw = bytearray()
    reader = asyncio.StreamReader(limit=2**24)

    async def tee() -> None:
        while chunk := await agent_out.read(65536):
            raw.extend(chunk)
            reader.feed_data(chunk)
        reader.feed_eof()

    stderr_task = asyncio.ensure_future(proc.stderr.read())
    tee_task = asyncio.ensure_future(tee())
    conn = ClientSideConnection(lambda _c: example_client.ExampleClient(), agent_in, reader)
    from acp import PROTOCOL_VERSION
    from acp.schema import TextContentBlock

    await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), 60)
    session = await asyncio.wait_for(conn.new_session(cwd=str(REPO), mcp_servers=[]), 30)
    await asyncio.wait_for(
        conn.prompt(session_id=session.session_id, prompt=[TextContentBlock(type="text", text="hi")]), 30
    )
    await asyncio.sleep(0.5)  # a few schedule delays and metric intervals while connected
    if stdio == "pipes":
        agent_in.close()
    else:
        agent_in.write_eof()  # the agent's end of input; its output may still come
    await asyncio.wait_for(proc.wait(), 30)
    await asyncio.wait_for(tee_task, 10)
    stderr = (await asyncio.wait_for(stderr_task, 10)).decode("utf-8", "replace")
    with contextlib.suppress(Exception):
        await conn.close()
    for writer in [agent_in, *(w for w in kept if isinstance(w, asyncio.StreamWriter))]:
        writer.close()

    lines = bytes(raw).split(b"\n")
    assert lines[-1] == b""
    for line in lines[:-1]:
        assert line.startswith(b'{"') and line.endswith(b"}"), bytes(raw)[:3000]
        message = json.loads(line)  # nothing but JSON-RPC on stdout
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line[:200]
    assert '"name": "session/prompt' in stderr, stderr[-2000:]  # the spans went to stderr
    assert '"resource_metrics"' in stderr, stderr[-2000:]  # and so did the metrics


# ------------------------------------------------------------------ the proxy's exit report


def _run_editor(
    agent: list[str], *, traced: bool, editor_env: dict[str, str] | None = None, agent_env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Run the editor stand-in (zero-code traced or not); its result line and its stderr (which the
    spawned process inherits)."""
    env = base_env(**(editor_env or {}))
    # A long grace before SIGTERM: a loaded machine must not turn a slow exit into a kill; what the proxy took
    # after its agent's exit is bounded instead.
    command = [sys.executable, STANDIN, "--agent-env", json.dumps(agent_env or {}), "--grace", "15", "--", *agent]
    if traced:
        command = [INSTRUMENT, *command]
        # The zero-code editor's own start and export are not what is compared.
        env.setdefault("OTEL_METRICS_EXPORTER", "none")
        env.setdefault("OTEL_LOGS_EXPORTER", "none")
        env.setdefault("OTEL_SERVICE_NAME", "editor")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO))
    with ExitClock(proc.pid) as clock:
        try:
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["stop"] == "end_turn", result
    proxy, agent = clock.proxy(), clock.agent()
    if proxy in clock.exited and agent in clock.exited:  # only _check_one_line_and_quick needs it
        result["proxy_after_agent_s"] = clock.exited[proxy] - clock.exited[agent]
    return result, stderr


def _proxy_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if PROXY_LINE.match(line)]


@contextlib.contextmanager
def _nothing_on_default_port() -> Iterator[None]:
    """Hold the default OTLP/HTTP port (4318) bound on loopback without listening: connecting is refused."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 4318))
    except OSError:
        holder.close()
        pytest.skip("something else holds port 4318 on this machine")
    try:
        yield
    finally:
        holder.close()


# What the proxy may take after its agent's exit: its flush bound (--flush-timeout, 1 s by default) and the
# relaying of the agent's last output (OUTPUT_DRAIN_CAP_S), twice over for a loaded machine. An export that
# waited out the exporter's own timeout (10 s) would not fit.
PROXY_EXIT_BOUND_S = 2 * (1.0 + process.OUTPUT_DRAIN_CAP_S)


def _check_one_line_and_quick(stderr: str, result: dict[str, Any], *expected: str) -> None:
    lines = _proxy_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    for text in expected:
        assert text in lines[0], lines[0]
    # The proxy exited by itself when its stdin closed (the editor's grace before its SIGTERM is 15 s here),
    # within its own bounds after its agent's exit (what the agent took to exit is not the proxy's doing).
    assert result["returncode"] == 0, result
    assert "proxy_after_agent_s" in result, "the proxy and its agent were not seen to exit"
    assert result["proxy_after_agent_s"] < PROXY_EXIT_BOUND_S, result


PROXIED = [*PROXY, "--", sys.executable, EXAMPLE_AGENT]


@EXAMPLES_IMPORT
@pytest.mark.e2e
def test_untraced_editor_no_backend_one_line() -> None:
    """An untraced SDK editor trims the environment: the proxy exports to the default endpoint."""
    with _nothing_on_default_port():
        result, stderr = _run_editor(PROXIED, traced=False)
    _check_one_line_and_quick(
        stderr,
        result,
        "not exported to http://localhost:4318/v1/traces",
        "the default endpoint",
        "nothing is listening",
    )


@EXAMPLES_IMPORT
@pytest.mark.e2e
@pytest.mark.parametrize("traced", [False, True], ids=["untraced-editor", "zero-code-editor"])
def test_endpoint_down_one_line(traced: bool) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    # The untraced editor passes the settings in the agent's env= (as an editor's agent configuration);
    # the zero-code editor has them itself and acp-otel passes them on.
    result, stderr = _run_editor(
        PROXIED, traced=traced, editor_env=otel if traced else None, agent_env=None if traced else otel
    )
    _check_one_line_and_quick(stderr, result, f"not exported to {endpoint}/v1/traces", "nothing is listening")


@EXAMPLES_IMPORT
@pytest.mark.e2e
def test_http_exporter_at_a_grpc_port_one_line() -> None:
    with GrpcOtlpReceiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        result, stderr = _run_editor(PROXIED, traced=True, editor_env=otel)
    _check_one_line_and_quick(stderr, result, receiver.endpoint, "over OTLP/HTTP", "PROTOCOL=grpc")


@EXAMPLES_IMPORT
@DEAD_GRPC_ENDPOINT_GIVES_UP
@pytest.mark.e2e
def test_grpc_exporter_at_an_http_port_one_line() -> None:
    with OtlpSink() as sink:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.port}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        result, stderr = _run_editor(PROXIED, traced=False, agent_env=otel)
    _check_one_line_and_quick(stderr, result, f"127.0.0.1:{sink.port}", "over OTLP/gRPC")


@EXAMPLES_IMPORT
@pytest.mark.e2e
@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_a_rejected_setting_is_said_once_without_doubled_prefixes(verbose: bool) -> None:
    with OtlpSink() as sink:
        env = {**sink.env(), "OTEL_PYTHON_ACP_TOOL_SPANS": "sometimes"}
        # --flush-timeout: a loaded machine must not slow the final export past the bound (also reported).
        proxy = [*PROXY, *(["-v"] if verbose else []), "--flush-timeout", "10", "--", sys.executable, EXAMPLE_AGENT]
        _result, stderr = _run_editor(proxy, traced=False, agent_env=env)
        sink.wait_for(lambda spans: any(s.name.partition(" ")[0] == "session/prompt" for s in spans))
    lines = _proxy_lines(stderr)
    report = [line for line in lines if "telemetry:" in line]
    assert len(report) == 1 and "'sometimes'" in report[0] and "OTEL_PYTHON_ACP_TOOL_SPANS" in report[0], lines
    assert "not exported" not in report[0]  # the spans did arrive
    if not verbose:
        assert lines == report
    for line in lines:
        assert not re.search(r"acp[-_]otel[^:]*: (\S+: )?acp[-_]otel", line), line


@EXAMPLES_IMPORT
@pytest.mark.e2e
def test_all_exported_and_nothing_rejected_says_nothing() -> None:
    with OtlpSink() as sink:
        proxied = [*PROXY, "--flush-timeout", "10", "--", sys.executable, EXAMPLE_AGENT]  # see above
        _result, stderr = _run_editor(proxied, traced=False, agent_env=sink.env())
        sink.wait_for(lambda spans: any(s.name.partition(" ")[0] == "session/prompt" for s in spans))
    assert _proxy_lines(stderr) == []


# ------------------------------------------------------------------ service names per hop


@EXAMPLES_IMPORT
@pytest.mark.e2e
def test_each_hop_has_its_own_service_name() -> None:
    """A zero-code editor spawns ``acp-otel proxy -- opentelemetry-instrument python agent.py``: three
    services, named after what each runs; with ``--service-name`` only the proxy's changes."""
    with OtlpSink() as sink:
        # The agent exports itself: the proxy keeps its exporter settings to itself, so the command gives them.
        agent = sink.for_agent(INSTRUMENT, sys.executable, EXAMPLE_AGENT)
        _run_editor([*PROXY, "--flush-timeout", "10", "--", *agent], traced=True, editor_env=sink.env())
        spans = sink.wait_for(lambda s: {"editor", "agent-proxy", "agent"} <= {x.service for x in s})
        assert {s.service for s in spans} == {"editor", "agent-proxy", "agent"}
    with OtlpSink() as sink:
        agent = sink.for_agent(INSTRUMENT, sys.executable, EXAMPLE_AGENT)
        proxy = [*PROXY, "--flush-timeout", "10", "--service-name", "my-proxy", "--", *agent]
        _run_editor(proxy, traced=True, editor_env=sink.env())
        spans = sink.wait_for(lambda s: {"editor", "my-proxy", "agent"} <= {x.service for x in s})
        assert {s.service for s in spans} == {"editor", "my-proxy", "agent"}


def test_an_export_still_running_at_the_bound_is_reported_with_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: an OTLP export that does not finish within the flush bound, to an endpoint where nothing
    listens: one line naming the endpoint, the bound and the reason."""
    import io
    import threading

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    from acp_otel._proxy import telemetry

    release = threading.Event()

    class Slow:
        def export(self, spans: Any) -> SpanExportResult:
            release.wait(10)
            return SpanExportResult.FAILURE

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

        def shutdown(self) -> None:
            release.set()

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    exporter = telemetry._Accounted("otlp", Slow())
    provider = TracerProvider(shutdown_on_exit=False)
    tel = telemetry.Telemetry(provider, [exporter], telemetry._Collector())
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    provider.get_tracer("t").start_span("s").end()  # queued until the final flush, which then hangs
    err = io.StringIO()
    try:
        assert tel.finish(0.2, err) is False
    finally:
        release.set()
        provider.shutdown()
    line = err.getvalue()
    assert line.count("\n") == 1 and line.startswith("acp-otel proxy: telemetry: "), line
    assert f"the export to {endpoint}/v1/traces had not finished after 0.2 s" in line, line
    assert "nothing is listening there" in line, line
