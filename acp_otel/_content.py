"""Captured content of a turn, in the shapes backends read: GenAI messages (JSON) and plain text.

Used only when ``capture_content`` is on. ``gen_ai.input.messages`` / ``gen_ai.output.messages`` follow the
GenAI conventions' message JSON schema (a list of ``{"role", "parts"}``; the finish reason is the turn's
``gen_ai.response.finish_reasons``, not a field of the message); ``input.value`` / ``output.value`` are
OpenInference's plain text. Every value fits ``limit`` characters: a JSON value is shortened inside its
strings, so that it stays valid JSON (:func:`json_text`, also for tool call arguments and results).
"""

from __future__ import annotations

import json
from typing import Any

from . import _semconv as sc

# Part keys whose strings may be shortened to make a message list fit its limit.
_SHRINKABLE = ("content", "uri")


def _modality(mime_type: Any) -> str:
    if type(mime_type) is str:
        head = mime_type.partition("/")[0]
        if head in ("image", "audio", "video"):
            return head
    return "document"


def _part(block: Any) -> dict[str, Any] | None:
    """One ACP content block as a GenAI message part (``None`` for what is not a block)."""
    if type(block) is not dict:
        return None
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return {"type": "text", "content": text if type(text) is str else ""}
    mime_type = block.get("mimeType")
    if kind in ("image", "audio"):
        part = {"type": "blob", "modality": kind, "content": str(block.get("data", ""))}
    elif kind == "resource_link":
        part = {"type": "uri", "modality": _modality(mime_type), "uri": str(block.get("uri", ""))}
    elif kind == "resource":
        resource = block.get("resource")
        resource = resource if type(resource) is dict else {}
        mime_type = resource.get("mimeType")
        if type(resource.get("text")) is str:
            return {"type": "text", "content": resource["text"]}
        part = {"type": "blob", "modality": _modality(mime_type), "content": str(resource.get("blob", ""))}
    else:
        return {"type": kind if type(kind) is str else "unknown"}
    if type(mime_type) is str:
        part["mime_type"] = mime_type
    return part


def prompt_parts(prompt: Any) -> list[dict[str, Any]]:
    """The GenAI parts of a ``session/prompt``'s content blocks."""
    if type(prompt) is not list:
        return []
    return [part for part in map(_part, prompt) if part is not None]


def parts_text(parts: list[dict[str, Any]], limit: int) -> str:
    """The text parts joined by newlines, at most ``limit`` characters."""
    text = "\n".join(p["content"] for p in parts if p.get("type") == "text" and type(p.get("content")) is str)
    return text[:limit]


def output_message(text: str) -> dict[str, Any]:
    """The agent's streamed text as one GenAI output message."""
    parts = [{"type": "text", "content": text}] if text else []
    return {"role": "assistant", "parts": parts}


def messages_json(messages: list[dict[str, Any]], limit: int) -> str:
    """``messages`` as JSON of at most ``limit`` characters, shortening part strings (last first, in place).

    Only when even the messages without their strings are longer than ``limit`` is the JSON cut itself.
    """
    strings = [
        (part, key)
        for message in messages
        for part in message.get("parts", ())
        for key in _SHRINKABLE
        if type(part.get(key)) is str
    ]
    for part, key in strings:  # nothing longer than the whole limit survives anyway
        if len(part[key]) > limit:
            part[key] = part[key][:limit]
    text = json.dumps(messages, ensure_ascii=False)
    for part, key in reversed(strings):
        excess = len(text) - limit
        if excess <= 0:
            return text
        # Each character removed shortens the JSON by at least one (escapes by more).
        value = part[key]
        part[key] = value[: max(0, len(value) - excess)]
        text = json.dumps(messages, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit]


def _strings(value: Any, out: list[tuple[Any, Any]], depth: int = 0) -> None:
    """The (container, key) of every string in a JSON value (keys of objects stay as they are)."""
    if depth > 64:
        return
    items = value.items() if type(value) is dict else enumerate(value) if type(value) is list else ()
    for key, item in items:
        if type(item) is str:
            out.append((value, key))
        else:
            _strings(item, out, depth + 1)


def json_text(value: Any, limit: int) -> str:
    """``value`` (a JSON value: a tool call's ``rawInput`` / ``rawOutput``) as JSON of at most ``limit``
    characters that stays valid JSON: its strings are shortened (the last first), as for messages; a value
    whose structure alone is longer than ``limit`` becomes a JSON string of its cut text."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except Exception:  # not JSON (the SDK's models are dumped before they reach us; a hostile value may not be)
        return json.dumps(truncate(value, max(0, limit - 2)), ensure_ascii=False)[:limit]
    if len(text) <= limit:
        return text
    if type(value) is str:
        value = [value]  # shortened like any other string, then unwrapped
        unwrap = True
    else:
        value = json.loads(text)  # a copy: the caller's value is not changed
        unwrap = False
    strings: list[tuple[Any, Any]] = []
    _strings(value, strings)
    for container, key in reversed(strings):
        excess = len(json.dumps(value[0] if unwrap else value, ensure_ascii=False)) - limit
        if excess <= 0:
            break
        item = container[key]
        container[key] = item[: max(0, len(item) - excess)]
    text = json.dumps(value[0] if unwrap else value, ensure_ascii=False)
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 2)]
    while len(json.dumps(cut, ensure_ascii=False)) > limit and cut:  # escapes make the string longer
        cut = cut[: len(cut) - (len(json.dumps(cut, ensure_ascii=False)) - limit)]
    return json.dumps(cut, ensure_ascii=False)


def truncate(value: Any, limit: int) -> str:
    """``value`` as text (JSON for non-strings), at most ``limit`` characters."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        text = repr(value)
    return text if len(text) <= limit else text[:limit]


def input_attributes(params: Any, limit: int) -> dict[str, Any]:
    """A ``session/prompt``'s prompt as a turn's input attributes (GenAI input messages and plain text)."""
    prompt = params.get("prompt") if type(params) is dict else None
    parts = prompt_parts(prompt)
    text = parts_text(parts, limit)  # first: messages_json shortens the parts it fits
    return {
        sc.GEN_AI_INPUT_MESSAGES: messages_json([{"role": "user", "parts": parts}], limit),
        sc.INPUT_VALUE: text,
        sc.INPUT_MIME_TYPE: sc.TEXT_PLAIN,
    }


def output_attributes(attributes: dict[str, Any], output: list[str], limit: int) -> None:
    """Add a turn's streamed agent text (``output``) to its end ``attributes``, as GenAI output messages and text."""
    text = "".join(output)
    message = output_message(text)
    attributes[sc.GEN_AI_OUTPUT_MESSAGES] = messages_json([message], limit)
    attributes[sc.OUTPUT_VALUE] = text
    attributes[sc.OUTPUT_MIME_TYPE] = sc.TEXT_PLAIN
