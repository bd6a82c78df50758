"""Privacy: by default no content of the conversation reaches any exported span; with capture on, the
content appears, truncated to ``capture_content_max_length`` and never beyond it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from acp_app import FILE_BODY, SECRET, SECRET_PATH, TraceAgent, TraceClient, open_session, prompt
from paths import PEERS
from sdk_versions import EXAMPLES_IMPORT
from spans import span_strings

PROMPT_WORDS = "PROMPT-WORDS-PRIVATE"
# Everything the test app says that is conversation content (chunks, tool titles, permission options,
# file path and body, error text and data, extension params).
APP_CONTENT = (SECRET, FILE_BODY, PROMPT_WORDS, SECRET_PATH, "Allow once", "handler blew up")
CONTENT_ATTRIBUTES = (
    "acp.params",
    "acp.result",
    "acp.error.data",
    "acp.error.detail",
    # tool call spans
    "acp.tool_call.title",
    "acp.tool_call.locations",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    # turn spans: the GenAI messages and OpenInference's input / output values
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "input.value",
    "output.value",
)
# Recorded only with the content they describe.
CAPTURE_ONLY_ATTRIBUTES = ("input.mime_type", "output.mime_type")


async def _turns(pair: Any) -> None:
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    assert (await prompt(p.client_conn, session_id, f"hello {PROMPT_WORDS}")).stop_reason == "end_turn"
    for text in (f"fail {PROMPT_WORDS}", f"rpcerror {PROMPT_WORDS}"):
        with pytest.raises(Exception):  # noqa: B017 - the app sees a RequestError either way
            await prompt(p.client_conn, session_id, text)
    await p.client_conn.ext_method("test.dev/ping", {"value": PROMPT_WORDS})
    await p.close()


def _leaks(strings: Iterable[str], secrets: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(s, text[:120]) for text in strings for s in secrets if s in text]


@pytest.mark.parametrize("mode", ["turn", "all", "events"])
async def test_default_records_no_content(mode: str, instrument: Any, pair: Any, exporter: Any) -> None:
    instrument(notification_spans=mode)
    await _turns(pair)
    spans = exporter.get_finished_spans()
    assert len(spans) > 15
    names = {"session/prompt", "execute_tool read", "fs/read_text_file", "session/request_permission"}
    methods = {s.name for s in spans} | {s.attributes.get("acp.method.name") for s in spans}
    assert names | ({"session/update"} if mode == "all" else set()) <= methods
    leaks = [leak for span in spans for leak in _leaks(span_strings(span), APP_CONTENT)]
    assert not leaks, leaks
    for span in spans:
        assert not set(CONTENT_ATTRIBUTES + CAPTURE_ONLY_ATTRIBUTES) & set(span.attributes or {}), span.name
    # Errors are still visible, without their text or data.
    prompts = [s for s in spans if s.attributes.get("acp.method.name") == "session/prompt"]
    failed = [s for s in prompts if s.status.status_code.name == "ERROR"]
    assert len(failed) == 4  # two failing turns, each seen by the CLIENT and the SERVER span
    assert {s.attributes["error.type"] for s in failed if s.kind.name == "SERVER"} == {"ValueError", "-32602"}


@pytest.mark.parametrize("limit", [16, 64, 100_000])
async def test_capture_content_is_truncated(limit: int, instrument: Any, pair: Any, exporter: Any) -> None:
    instrument(capture_content=True, capture_content_max_length=limit)
    await _turns(pair)
    spans = exporter.get_finished_spans()
    captured: list[str] = []
    for span in spans:
        items = list((span.attributes or {}).items())
        for event in span.events:
            items += list((event.attributes or {}).items())
        for key, value in items:
            if key in CONTENT_ATTRIBUTES:
                assert isinstance(value, str) and len(value) <= limit, (span.name, key, len(value))
                captured.append(value)
    assert captured
    turns = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert len(turns) == 6  # three turns, each on the editor's and the agent's side: each shows its own view
    for turn in turns:
        a = turn.attributes
        assert {a["input.mime_type"], a["output.mime_type"]} == {"text/plain"}
        assert PROMPT_WORDS[: limit - 9] in a["input.value"]  # after "rpcerror ", the longest prefix
        if limit >= 1000:  # whole: valid JSON in the conventions' message shape
            (message,) = json.loads(a["gen_ai.input.messages"])
            assert message["role"] == "user" and message["parts"][0]["type"] == "text"
            assert PROMPT_WORDS in message["parts"][0]["content"]
            (answer,) = json.loads(a["gen_ai.output.messages"])
            assert answer["role"] == "assistant" and "finish_reason" not in answer  # on the span, not the message
    (tool,) = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"]
    assert 0 < len(tool.attributes["gen_ai.tool.call.arguments"]) <= limit  # rawInput, as the others
    json.loads(tool.attributes["gen_ai.tool.call.arguments"])  # still JSON, however short the limit
    answered = [t for t in turns if t.attributes["output.value"]]
    assert len(answered) == 2 and all(SECRET[: max(0, limit - 6)] in t.attributes["output.value"] for t in answered)
    joined = "\n".join(captured)
    if limit >= 1000:  # everything fits: the content is there, whole
        for text in (SECRET, FILE_BODY, PROMPT_WORDS, SECRET_PATH, f"Read {SECRET}", "Allow once"):
            assert text in joined, text
        assert any(len(v) > 64 for v in captured)
    else:
        assert any(len(v) == limit for v in captured)  # truncated at exactly the limit
    # Nothing outside the content attributes carries content, whatever the setting.
    leaks = [
        (span.name, leak)
        for span in spans
        for leak in _leaks(span_strings(span, exclude=CONTENT_ATTRIBUTES), APP_CONTENT)
    ]
    assert not leaks, leaks


# ------------------------------------------------------------------------------------------ the examples


def _run_examples(tmp: Path, capture: int | None) -> tuple[list[dict[str, Any]], str]:
    client_spans, agent_spans = os.path.join(tmp, "client.jsonl"), os.path.join(tmp, "agent.jsonl")
    secret_file = os.path.join(tmp, "private-PATH-SECRET.txt")
    with open(secret_file, "w", encoding="utf-8") as fh:
        fh.write("line one FILE-CONTENT-SECRET\nline two\n")
    runner = str(PEERS / "privacy_runner.py")
    cap = ["--capture", str(capture)] if capture else []
    cmd = [
        sys.executable,
        runner,
        client_spans,
        *cap,
        "client",
        "-p",
        f"Please {PROMPT_WORDS} now",
        "-f",
        secret_file,
        "--",
        sys.executable,
        runner,
        agent_spans,
        *cap,
        "agent",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans = []
    for path in (client_spans, agent_spans):
        with open(path, encoding="utf-8") as fh:
            spans += [json.loads(line) for line in fh if line.strip()]
    return spans, proc.stdout


def _json_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)
    elif value is not None:
        yield str(value)


EXAMPLE_CONTENT = (
    PROMPT_WORDS,
    "private-PATH-SECRET",
    "FILE-CONTENT-SECRET",
    "Search the workspace",  # tool title and plan entry
    "Fetch https://docs.example.com",
    "Read private",  # tool title with the file name
    "3 matches",  # tool output
    "network unreachable",
    "Allow once",  # permission option
    "You asked",  # message chunk
    "languageId",  # extension result
)


@EXAMPLES_IMPORT
def test_examples_default_records_no_content(tmp_path: Path) -> None:
    spans, stdout = _run_examples(tmp_path, capture=None)
    assert "[stop] end_turn" in stdout
    services = {s["resource"]["attributes"].get("service.name") for s in spans}
    assert services == {"privacy-client", "privacy-agent"}
    assert len(spans) > 12
    assert len([s for s in spans if s["name"].startswith("execute_tool")]) >= 3  # the example's tool calls
    leaks = [(s["name"], t[:100]) for s in spans for t in _json_strings(s) for c in EXAMPLE_CONTENT if c in t]
    assert not leaks, leaks


@EXAMPLES_IMPORT
def test_examples_capture_content_truncated(tmp_path: Path) -> None:
    limit = 48
    spans, _ = _run_examples(tmp_path, capture=limit)
    captured = []
    for s in spans:
        items = list(s["attributes"].items()) + [kv for e in s["events"] for kv in e["attributes"].items()]
        for key, value in items:
            if key in CONTENT_ATTRIBUTES:
                assert len(value) <= limit
                captured.append(value)
    assert any(PROMPT_WORDS in v or "FILE-CONTENT" in v for v in captured), captured  # content is captured
    assert any(len(v) == limit for v in captured), captured  # and truncated at exactly the limit
