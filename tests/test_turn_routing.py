"""The engine hands the turn layer each message of a session with a turn in flight once (``TurnLayer.route``),
in either direction, and consults it nowhere else per message: the turn starts and ends with its request."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider

from acp_otel._engine import Engine
from acp_otel._settings import load_settings
from acp_otel._turns import TurnLayer


class Peer:
    pass


TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call made to the turn layer's public methods, by name."""
    seen: list[str] = []
    for cls in (TurnLayer,):
        for name, member in list(vars(cls).items()):
            if callable(member) and not name.startswith("_"):

                def spy(*args: Any, _name: str = f"{cls.__name__}.{name}", _f: Any = member, **kw: Any) -> Any:
                    seen.append(_name)
                    return _f(*args, **kw)

                monkeypatch.setattr(cls, name, spy)
    return seen


@pytest.mark.parametrize("traced", [True, False], ids=["traced sender", "untraced sender"])
def test_each_message_of_a_turn_reaches_the_turn_layer_once(monkeypatch: pytest.MonkeyPatch, traced: bool) -> None:
    seen = _calls(monkeypatch)
    engine = Engine(TracerProvider().get_tracer("t"), load_settings({"tool_spans": "always"}, {}))
    agent, client = Peer(), Peer()
    meta = {"_meta": {"traceparent": TP}} if traced else {}
    prompt = {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s", "prompt": [], **meta}}
    call, _, context = engine.begin_incoming(agent, prompt, True)
    assert call is not None and seen == ["TurnLayer.start"]
    seen.clear()
    token = otel_context.attach(context)
    try:
        sent: list[tuple[str, dict[str, Any]]] = [
            ("session/update", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk"}}),
            ("session/update", {"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "t"}}),
            ("session/request_permission", {"sessionId": "s", "toolCall": {"toolCallId": "t"}}),
            ("fs/read_text_file", {"sessionId": "s", "path": "/a"}),
            ("_x.dev/other", {"sessionId": "s"}),
        ]
        for method, params in sent:
            out, _ = engine.begin_outgoing(agent, method, params, None if method == "session/update" else 7)
            engine.end_result(out, {})
    finally:
        otel_context.detach(token)
    received = [{"jsonrpc": "2.0", "method": m, "params": {**p, **meta}} for m, p in sent]
    # The client's side of the same turn: its prompt, then what the agent sends it.
    out, _ = engine.begin_outgoing(client, "session/prompt", {"sessionId": "s", "prompt": []}, 2)
    for message in received:
        inc, _, _ = engine.begin_incoming(client, message, False)
        engine.end_result(inc, None)
    routed = [name for name in seen if name == "TurnLayer.route"]
    assert len(routed) == 2 * len(sent)  # once per message, each side
    # Besides route, only the client's turn starting (with its request span).
    assert [name for name in seen if name != "TurnLayer.route"] == ["TurnLayer.start"]
    engine.end_result(out, {"stopReason": "end_turn"})
    engine.end_payload(call, {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}})
