"""A real backend: acp-otel's spans in Arize Phoenix, read back through Phoenix's own API.

Run by ``nox -s phoenix`` only (which installs Phoenix in a virtual environment of its own and names its
Python in ``ACP_OTEL_PHOENIX_PYTHON``). The file name does not match pytest's ``test_*.py`` pattern, so the
default test run does not collect it; pytest collects it when it is named on the command line.

Two ways in, each with content capture off and on:

* zero-code, in-process: ``opentelemetry-instrument python examples/client.py``, which spawns
  ``examples/agent.py`` traced too; OTLP/gRPC (the distro's default) into Phoenix's gRPC receiver;
* the proxy: an SDK client (the example client's handlers) runs ``acp-otel proxy -- python examples/agent.py``
  as an editor does; OTLP/HTTP (protobuf) into Phoenix's ``/v1/traces``.

Every export goes through a tee (``otlp_tee.py``) that keeps what it forwards, so what Phoenix shows is
compared span for span with what was sent.

Then Gemini CLI, Qwen Code and OpenCode (``tests/real_agents``: the npm agents, the scripted model, the editor
stand-in), one turn each behind ``acp-otel proxy --agent-telemetry``: in Phoenix every model call of the turn is an
LLM span with its tokens, the trace's tokens add up to what the scripted model served, each ACP tool call is one TOOL
span, and every span and parent is in the project (nothing dangles); no canary of the turn reaches Phoenix.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from otlp_tee import GrpcTee, HttpTee, TeeSpan
from phoenix_server import LOOPBACK_ADDRESSES, PhoenixServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
OTEL_INSTRUMENT = str(BIN / "opentelemetry-instrument")
ACP_OTEL = str(BIN / "acp-otel")

# Canaries: content that must not reach the backend unless content capture is on.
PROMPT = "Summarise canary-prompt-5f1c please"
FILE_BODY = "canary-file-body-9a2e\nsecond line\n"
CANARIES = ("canary-prompt-5f1c", "canary-file-body-9a2e", "canary-path-7d3b")

TURN, TOOL = "invoke_agent", "execute_tool"
# What the example agent reports as the turn's usage (examples/agent.py).
INPUT_TOKENS, OUTPUT_TOKENS = 1200, 340

SPAN_IO = """
query ($id: ID!) {
  node(id: $id) { ... on Span { name spanKind input { value mimeType } output { value mimeType } } }
}
"""


@pytest.fixture(scope="module")
def phoenix() -> Iterator[PhoenixServer]:
    python = os.environ.get("ACP_OTEL_PHOENIX_PYTHON")
    if not python:
        pytest.skip("needs a Phoenix installation: run `nox -s phoenix` (it sets ACP_OTEL_PHOENIX_PYTHON)")
    with PhoenixServer(python) as server:
        yield server


def make_attachment(where: Path) -> Path:
    """The file the prompt attaches: its path and its text are both canaries."""
    folder = where / "canary-path-7d3b"
    folder.mkdir()
    path = folder / "notes.txt"
    path.write_text(FILE_BODY, encoding="utf-8")
    return path


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_", "ACP_OTEL_"))}
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def telemetry_env(project: str, capture: bool, endpoint: str, protocol: str) -> dict[str, str]:
    """The environment a user sets to send to Phoenix (see docs/backends.md), pointed at the tee."""
    return clean_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",  # Phoenix takes traces only
        OTEL_LOGS_EXPORTER="none",
        OTEL_PYTHON_ACP_CAPTURE_CONTENT="true" if capture else "false",
    )


@dataclass
class Run:
    """One traced turn: what was sent (through the tee), what Phoenix holds, what the editor saw."""

    way: str  # "zero-code" or "proxy"
    capture: bool
    project: str
    sent: list[TeeSpan]
    stored: list[dict[str, Any]]
    message: str  # the agent's streamed text, as the editor assembled it


# ---------------------------------------------------------------------------------------------- the runs


def zero_code_run(phoenix: PhoenixServer, attachment: Path, capture: bool) -> Run:
    project = f"zero-code-capture-{'on' if capture else 'off'}"
    with GrpcTee(phoenix.grpc_target) as tee:
        env = telemetry_env(project, capture, tee.endpoint, "grpc")
        env["OTEL_SERVICE_NAME"] = "acp-example-client"
        done = subprocess.run(
            [
                OTEL_INSTRUMENT,
                sys.executable,
                str(EXAMPLES / "client.py"),
                "--prompt",
                PROMPT,
                "--file",
                str(attachment),
            ],
            env=env,
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert tee.errors == [], tee.errors
    assert "Traceback" not in done.stderr and "export" not in done.stderr.lower(), done.stderr
    (message,) = [line.removeprefix("[message] ") for line in done.stdout.splitlines() if line.startswith("[message]")]
    return finish(phoenix, "zero-code", capture, project, tee.snapshot(), message)


@dataclass
class EditorExit:
    returncode: int | None
    seconds: float  # from leaving spawn_agent_process (stdin closed) to its end


async def editor_turn(command: list[str], env: dict[str, str], attachment: Path) -> tuple[str, EditorExit, str]:
    """An editor stand-in: the example client's handlers over ``spawn_agent_process``, one turn, then exit."""
    import tempfile

    from acp import PROTOCOL_VERSION, spawn_agent_process
    from acp.schema import (
        ClientCapabilities,
        FileSystemCapabilities,
        Implementation,
        ResourceContentBlock,
        TextContentBlock,
    )

    from acp_otel._demo.traced_client import load_client

    module = load_client(EXAMPLES / "client.py")
    client = module.ExampleClient(allow=True, offer_extension=True)
    with tempfile.TemporaryFile() as stderr:
        async with spawn_agent_process(
            client, command[0], *command[1:], env=env, cwd=str(ROOT), transport_kwargs={"stderr": stderr}
        ) as (conn, process):
            await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=False),
                    terminal=False,
                    field_meta={module.EXT_NAMESPACE: {"buffers": True}},
                ),
                client_info=Implementation(name="editor-stand-in", version="0.0.1"),
            )
            session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
            response = await conn.prompt(
                session_id=session.session_id,
                prompt=[
                    TextContentBlock(type="text", text=PROMPT),
                    ResourceContentBlock(type="resource_link", uri=attachment.as_uri(), name=attachment.name),
                ],
            )
            assert response.stop_reason == "end_turn"
            leaving = time.monotonic()
        left = EditorExit(process.returncode, time.monotonic() - leaving)
        stderr.seek(0)
        return "".join(client.message), left, stderr.read().decode("utf-8", "replace")


def proxy_run(phoenix: PhoenixServer, attachment: Path, capture: bool, project: str = "") -> tuple[Run, EditorExit]:
    project = project or f"proxy-capture-{'on' if capture else 'off'}"
    agent = [sys.executable, str(EXAMPLES / "agent.py")]
    with HttpTee(f"{phoenix.base_url}/v1/traces") as tee:
        env = telemetry_env(project, capture, tee.endpoint, "http/protobuf")
        message, left, stderr = asyncio.run(editor_turn([ACP_OTEL, "proxy", "--", *agent], env, attachment))
    assert tee.errors == [], tee.errors
    assert "Traceback" not in stderr and "export" not in stderr.lower(), stderr
    return finish(phoenix, "proxy", capture, project, tee.snapshot(), message), left


def finish(phoenix: PhoenixServer, way: str, capture: bool, project: str, sent: list[TeeSpan], message: str) -> Run:
    assert sent, "nothing was exported"
    assert {s.resource.get("openinference.project.name") for s in sent} == {project}
    stored = phoenix.wait_for_spans(project, {s.span_id for s in sent})
    return Run(way, capture, project, sent, stored, message)


# ---------------------------------------------------------------------------------------------- checks


def by_operation(run: Run, operation: str) -> list[dict[str, Any]]:
    return [s for s in run.stored if s["attributes"].get("gen_ai.operation.name") == operation]


def check_same_spans(run: Run) -> None:
    """Every span sent is in Phoenix with its trace, parent, name, status and attributes; nothing else is."""
    stored = {s["context"]["span_id"]: s for s in run.stored}
    assert set(stored) == {s.span_id for s in run.sent}
    for sent in run.sent:
        got = stored[sent.span_id]
        assert got["context"]["trace_id"] == sent.trace_id, sent.name
        assert got["parent_id"] == sent.parent_id, sent.name
        assert got["name"] == sent.name
        assert got["status_code"] == sent.status, sent.name
        missing = {k: v for k, v in sent.attributes.items() if got["attributes"].get(k) != v}
        assert not missing, (sent.name, missing, got["attributes"])
        assert [e["name"] for e in got["events"]] == sent.events, sent.name
    # Every parent link resolves inside what was exported: the trace is whole, nothing dangles.
    for got in run.stored:
        assert got["parent_id"] is None or got["parent_id"] in stored, got["name"]


def check_kinds(run: Run) -> dict[str, Any]:
    """Turns are AGENT spans, tool calls TOOL spans, under their turn; returns the one turn."""
    turns = by_operation(run, TURN)
    (turn_trace,) = {s["context"]["trace_id"] for s in turns}  # one turn, one trace
    assert {s["span_kind"] for s in turns} == {"AGENT"}, [(s["name"], s["span_kind"]) for s in turns]
    tools = by_operation(run, TOOL)
    # The example agent's turn makes three tool calls (search, fetch, read).
    assert sorted(s["attributes"]["gen_ai.tool.call.id"] for s in tools) == ["tool-fetch", "tool-read", "tool-search"]
    assert {s["span_kind"] for s in tools} == {"TOOL"}
    # Phoenix's own keys, derived from the GenAI ones: its Sessions view and its tool column.
    for span in turns + tools:
        assert span["attributes"]["session.id"] == span["attributes"]["gen_ai.conversation.id"], span["name"]
    for tool in tools:
        assert tool["attributes"]["tool.name"] == tool["attributes"]["gen_ai.tool.name"], tool["name"]
    assert {s["context"]["trace_id"] for s in tools} == {turn_trace}
    stored = {s["context"]["span_id"]: s for s in run.stored}
    turn_ids = {s["context"]["span_id"] for s in turns}
    for tool in tools:  # each tool call descends from a turn span
        ancestor = stored.get(tool["parent_id"] or "")
        while ancestor is not None and ancestor["context"]["span_id"] not in turn_ids:
            ancestor = stored.get(ancestor["parent_id"] or "")
        assert ancestor is not None, tool["name"]
    return turns[0]


def check_usage_once(run: Run) -> None:
    """The turn's token usage is on exactly one span of the run: an AGENT span (usage reported once)."""
    with_usage = [s for s in run.stored if "gen_ai.usage.input_tokens" in s["attributes"]]
    assert [(s["span_kind"], s["attributes"]["gen_ai.operation.name"]) for s in with_usage] == [("AGENT", TURN)], [
        (s["name"], s["span_kind"]) for s in with_usage
    ]
    attributes = with_usage[0]["attributes"]
    assert attributes["gen_ai.usage.input_tokens"] == INPUT_TOKENS
    assert attributes["gen_ai.usage.output_tokens"] == OUTPUT_TOKENS
    assert attributes["llm.token_count.prompt"] == INPUT_TOKENS  # Phoenix's token columns
    assert attributes["llm.token_count.completion"] == OUTPUT_TOKENS


def span_io(phoenix: PhoenixServer, span: dict[str, Any]) -> dict[str, Any]:
    node = phoenix.graphql(SPAN_IO, {"id": span["id"]})["node"]
    assert node["name"] == span["name"]
    return dict(node)


def check_no_content(phoenix: PhoenixServer, run: Run) -> None:
    """Capture off: no canary anywhere Phoenix keeps it, and no input or output on any span."""
    dump = json.dumps(run.stored)
    assert not [c for c in CANARIES if c in dump]
    assert not [c for c in CANARIES if c in repr(run.sent)]
    for span in run.stored:
        shown = span_io(phoenix, span)
        assert shown["input"] is None and shown["output"] is None, shown


def check_content_shown(phoenix: PhoenixServer, run: Run) -> None:
    """Capture on: Phoenix shows the prompt as the turn's input and the agent's streamed text as its output.

    Every turn span shows them: each traced process with capture on records its own view of the turn (content
    is not summed like usage; see docs/genai.md).
    """
    shown = [span_io(phoenix, span) for span in by_operation(run, TURN)]
    expected = {"value": PROMPT, "mimeType": "text"}, {"value": run.message, "mimeType": "text"}
    assert shown and [(s["input"], s["output"]) for s in shown] == [expected] * len(shown), shown
    assert "canary-prompt-5f1c" in run.message  # the agent echoes the prompt: a real check, not an empty string


# ---------------------------------------------------------------------------------------------- tests

RUNS = [("zero-code", False), ("zero-code", True), ("proxy", False), ("proxy", True)]


@pytest.fixture(scope="module", params=RUNS, ids=[f"{way}-capture-{'on' if on else 'off'}" for way, on in RUNS])
def run(request: pytest.FixtureRequest, phoenix: PhoenixServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One traced turn into Phoenix (each run once, in its own project; every check below reads it)."""
    way, capture = request.param
    attachment = make_attachment(tmp_path_factory.mktemp(way))
    if way == "zero-code":
        return zero_code_run(phoenix, attachment, capture)
    return proxy_run(phoenix, attachment, capture)[0]


def test_phoenix_listens_on_loopback_only(phoenix: PhoenixServer) -> None:
    sockets = phoenix.listening_sockets()
    ports = {port for _proto, _address, port in sockets}
    assert {phoenix.http_port, phoenix.grpc_port} <= ports, sockets
    assert [s for s in sockets if s[1] not in LOOPBACK_ADDRESSES] == [], sockets


def test_every_span_in_phoenix(run: Run) -> None:
    """What Phoenix holds is what was exported: same spans, parents, names, statuses, attributes, events."""
    check_same_spans(run)
    services = {s.resource.get("service.name") for s in run.sent}
    if run.way == "zero-code":  # the editor and the agent both exported into the project
        assert services == {"acp-example-client", "agent"}, services
    else:  # only the proxy traces (its service name derived from `python examples/agent.py`)
        assert services == {"agent-proxy"}, services


def test_turns_are_agents_and_tools_are_tools(run: Run) -> None:
    check_kinds(run)


def test_content_follows_capture(phoenix: PhoenixServer, run: Run) -> None:
    if run.capture:
        check_content_shown(phoenix, run)
    else:
        check_no_content(phoenix, run)


def test_usage_on_one_span_per_turn(run: Run) -> None:
    check_usage_once(run)


def test_editor_shutdown_as_without_proxy(phoenix: PhoenixServer, tmp_path: Path) -> None:
    """The editor stand-in closes the agent's stdin and the proxy exits by itself, as the bare agent does.

    ``spawn_agent_process`` closes stdin, waits 2 s, then terminates and 2 s later kills: exit status 0 means
    the proxy (its agent stopped and its spans flushed to Phoenix) was gone before the editor had to act.
    The seconds are printed for the record, not asserted (the machine's load decides them).
    """
    attachment = make_attachment(tmp_path)
    plain_message, plain, plain_stderr = asyncio.run(
        editor_turn([sys.executable, str(EXAMPLES / "agent.py")], clean_env(), attachment)
    )
    run, proxied = proxy_run(phoenix, attachment, capture=False, project="editor-shutdown")
    assert plain.returncode == 0, plain_stderr
    assert proxied.returncode == 0, "the proxy had to be terminated or killed by the editor"
    assert run.message == plain_message
    check_kinds(run)  # and the trace is in Phoenix
    print(f"\neditor exit: bare agent {plain.seconds:.3f} s, through the proxy into Phoenix {proxied.seconds:.3f} s")


# ---------------------------------------------------------------------------------------------- the agents' own

# Real agents behind `acp-otel proxy --agent-telemetry`, one scripted turn each (tests/real_agents: the agents
# from its package-lock.json, the scripted model, the editor stand-in), into Phoenix: what a GenAI backend shows.
REAL_AGENTS = ROOT / "tests" / "real_agents"
AGENT_NAMES = ["gemini", "qwen", "opencode"]
# What an agent's own telemetry cannot show yet (checked all the same: a check that starts to pass fails, so that
# its entry is removed).
TOKEN_GAPS: dict[str, str] = {}


@dataclass
class AgentRun:
    name: str
    project: str
    sent: list[TeeSpan]
    stored: list[dict[str, Any]]
    tool_call_ids: list[str]
    served_calls: list[tuple[int, int]]  # (input, output) tokens of each answer the scripted model served


def _real_agents() -> tuple[Any, Any, Any]:
    if str(REAL_AGENTS) not in sys.path:
        sys.path.insert(0, str(REAL_AGENTS))
    import agents
    import editor
    import model_server

    return agents, editor, model_server


def agent_run(phoenix: PhoenixServer, name: str, where: Path) -> AgentRun:
    agents, editor, model_server = _real_agents()
    project = f"agent-{name}"
    script = model_server.Script(where / "workspace", f"CANARY{os.urandom(6).hex()}")
    script.prepare()
    home = where / "home"
    home.mkdir()
    with model_server.ModelServer(script) as model, HttpTee(f"{phoenix.base_url}/v1/traces") as tee:
        agent = getattr(agents, f"{name}_agent")(home, model.url)
        if name == "gemini":  # the suite's harness switches Gemini's telemetry off in its settings: not here
            path = home / ".gemini" / "settings.json"
            path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "telemetry"}))
        env = {**telemetry_env(project, False, tee.endpoint, "http/protobuf"), **agent.env}
        try:
            run = asyncio.run(
                editor.run_turn(
                    agent.command,
                    env,
                    script.workspace,
                    f"Read the file, write another and run a command. {script.canary}-PROMPT",
                    proxy_args=["--agent-telemetry"],
                    before_prompt=model.begin_turn,
                    after_turn=model.wait_idle,
                    grace=agent.grace,
                    timeout=300,
                    tap=False,
                )
            )
        finally:
            agents.end_leftovers(home)
    assert run.result is not None and run.result.stop_reason == "end_turn", run.stderr[-3000:]
    assert tee.errors == [], tee.errors
    sent = tee.snapshot()
    assert sent, "nothing was exported"
    in_project = {s.span_id for s in sent if s.resource.get("openinference.project.name") == project}
    stored = phoenix.wait_for_spans(project, in_project)
    canaries = [c for c in script.canaries() if c in json.dumps(stored) or c in repr(sent)]
    assert not canaries, canaries
    return AgentRun(name, project, sent, stored, run.tool_call_ids(), list(model.turns[-1]))


@pytest.fixture(scope="module", params=AGENT_NAMES)
def agent(request: pytest.FixtureRequest, phoenix: PhoenixServer, tmp_path_factory: pytest.TempPathFactory) -> AgentRun:
    """One turn of a real agent with its own telemetry, into Phoenix (each agent once, in its own project)."""
    return agent_run(phoenix, request.param, tmp_path_factory.mktemp(request.param))


def _turn_trace(run: AgentRun) -> list[dict[str, Any]]:
    """The spans of the turn's trace: the one trace of every ``invoke_agent`` span (the proxy's, the agent's)."""
    (trace_id,) = {s["context"]["trace_id"] for s in run.stored if s["attributes"].get("gen_ai.operation.name") == TURN}
    return [s for s in run.stored if s["context"]["trace_id"] == trace_id]


def _known_gap(agent: AgentRun, gaps: dict[str, str], check: Callable[[], None]) -> None:
    """Run ``check``; for an agent in ``gaps`` it is expected to fail (xfail), and fails the test if it passes."""
    if agent.name not in gaps:
        check()
        return
    try:
        check()
    except AssertionError:
        pytest.xfail(gaps[agent.name])
    pytest.fail(f"{agent.name} passes now: take it out of the known gaps ({gaps[agent.name]})")


def test_agent_model_calls_are_llm_spans_with_tokens(agent: AgentRun) -> None:
    """Every model call the scripted model served is an LLM span with its tokens, once; those the agent started
    within the turn are the LLM spans of the turn's trace (Qwen Code starts two calls of its own as the turn
    answers: one that starts after the answer is not the turn's)."""
    _known_gap(agent, TOKEN_GAPS, lambda: _check_llm_spans(agent))


def _tokens(span: dict[str, Any]) -> tuple[Any, Any]:
    return span["attributes"].get("llm.token_count.prompt"), span["attributes"].get("llm.token_count.completion")


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _llm_in_turn(agent: AgentRun) -> list[dict[str, Any]]:
    """The LLM spans (in the whole project) that started within the proxy's turn span."""
    (turn,) = [s for s in agent.stored if s["name"].startswith("session/prompt") and s["span_kind"] == "AGENT"]
    start, end = _time(turn["start_time"]), _time(turn["end_time"])
    return [s for s in agent.stored if s["span_kind"] == "LLM" and start <= _time(s["start_time"]) <= end]


def _check_llm_spans(agent: AgentRun) -> None:
    llm = [s for s in agent.stored if s["span_kind"] == "LLM"]
    # Each answer the model served in the turn has token counts of its own: each is one span, none lost.
    seen = Counter(_tokens(s) for s in llm)
    assert all(seen[c] == 1 for c in agent.served_calls), (seen, agent.served_calls)
    in_turn = _llm_in_turn(agent)
    assert in_turn, [(s["name"], s["start_time"]) for s in llm]
    in_trace = [s for s in _turn_trace(agent) if s["span_kind"] == "LLM"]
    assert sorted(s["context"]["span_id"] for s in in_trace) == sorted(s["context"]["span_id"] for s in in_turn), [
        (s["name"], s["context"]["trace_id"], s["start_time"]) for s in llm
    ]


def test_agent_trace_tokens_are_what_the_model_served(agent: AgentRun) -> None:
    """The trace's token total (Phoenix's: every span's token counts summed) is what the model served for the
    calls of the turn: once."""
    _known_gap(agent, TOKEN_GAPS, lambda: _check_token_total(agent))


def _check_token_total(agent: AgentRun) -> None:
    trace = _turn_trace(agent)
    prompt = sum(s["attributes"].get("llm.token_count.prompt") or 0 for s in trace)
    completion = sum(s["attributes"].get("llm.token_count.completion") or 0 for s in trace)
    served = [_tokens(s) for s in _llm_in_turn(agent)]
    assert served and all(t in agent.served_calls for t in served), (served, agent.served_calls)
    assert (prompt, completion) == (sum(t[0] for t in served), sum(t[1] for t in served)), [
        (s["name"], s["span_kind"], s["attributes"].get("llm.token_count.prompt")) for s in trace
    ]


def test_agent_tool_calls_are_tool_spans_once(agent: AgentRun) -> None:
    """One TOOL span per ACP tool call of the turn, whoever made it (the proxy or the agent)."""
    tools = [s for s in _turn_trace(agent) if s["span_kind"] == "TOOL"]
    ids = sorted(str(s["attributes"].get("gen_ai.tool.call.id")) for s in tools)
    assert ids == sorted(agent.tool_call_ids), [(s["name"], s["attributes"].get("gen_ai.tool.call.id")) for s in tools]


def test_agent_trace_has_nothing_dangling(agent: AgentRun) -> None:
    """Every span sent is in the project, and every parent is there: the trace is whole in Phoenix."""
    outside = sorted({s.name for s in agent.sent if s.resource.get("openinference.project.name") != agent.project})
    assert not outside, outside
    stored = {s["context"]["span_id"] for s in agent.stored}
    dangling = sorted({s["name"] for s in agent.stored if s["parent_id"] is not None and s["parent_id"] not in stored})
    assert not dangling, dangling
