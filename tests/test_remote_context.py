"""The HTTP request's trace context as a fallback for a message without its own (acp_otel._remote), in process.

Which messages take it and how, without a server: the end-to-end behaviour is in test_remote_transports.py.
"""

from __future__ import annotations

import copy

import pytest

from acp_otel._remote import lacks_context, with_request_context

KEYS = ("traceparent", "tracestate", "baggage")
CARRIER = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s"}},
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s", "_meta": {"x.dev/k": 1}}},
    ],
)
def test_a_message_without_context_takes_the_requests_in_a_copy(message: dict) -> None:
    before = copy.deepcopy(message)
    assert lacks_context(message, KEYS)
    out = with_request_context(message, CARRIER)
    assert message == before  # the caller's message is never changed
    assert out["params"]["_meta"]["traceparent"] == CARRIER["traceparent"]
    # Everything else is as sent: other _meta keys, the other params, the envelope.
    assert {k: v for k, v in out["params"]["_meta"].items() if k != "traceparent"} == before["params"].get("_meta", {})
    assert {k: v for k, v in out["params"].items() if k != "_meta"} == {
        k: v for k, v in before["params"].items() if k != "_meta"
    }
    assert {k: v for k, v in out.items() if k != "params"} == {k: v for k, v in before.items() if k != "params"}


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}},  # a response makes no span
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1, 2]},  # no object to hold _meta
        {"jsonrpc": "2.0", "id": 1, "method": "m"},  # no params: adding them would change the message
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"_meta": "text"}},
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"_meta": {"traceparent": "00-1-2-01"}}},  # its own
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"_meta": {"baggage": "k=v"}}},
        ["not", "an", "object"],
    ],
)
def test_a_message_with_context_or_no_place_for_it_is_left_alone(message: object) -> None:
    assert not lacks_context(message, KEYS)


def test_no_carrier_no_copy() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {}}
    assert with_request_context(message, {}) is message
