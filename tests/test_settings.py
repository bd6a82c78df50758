"""Options: keyword arguments, then environment variables; invalid values fall back to defaults."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from acp_otel._settings import _OPTIONS, MethodMatcher, Settings, load_settings


def test_defaults() -> None:
    settings = load_settings({}, {})
    assert settings == Settings()
    assert not settings.capture_content and not settings.keep_sdk_spans
    assert settings.notification_spans == "turn" and settings.inject and settings.propagate_env
    assert settings.tool_spans == "auto"


def test_environment() -> None:
    env = {
        "OTEL_PYTHON_ACP_EXCLUDED_METHODS": "session/update, fs/*",
        "OTEL_PYTHON_ACP_CAPTURE_CONTENT": "true",
        "OTEL_PYTHON_ACP_CAPTURE_CONTENT_MAX_LENGTH": "64",
        "OTEL_PYTHON_ACP_KEEP_SDK_SPANS": "1",
        "OTEL_PYTHON_ACP_NOTIFICATION_SPANS": "Events",
        "OTEL_PYTHON_ACP_INJECT": "false",
        "OTEL_PYTHON_ACP_TOOL_SPANS": " Never",
    }
    s = load_settings({}, env)
    assert s.tool_spans == "never"
    assert s.excluded_methods("session/update") and s.excluded_methods("fs/read_text_file")
    assert not s.excluded_methods("session/prompt")
    assert s.capture_content and s.capture_content_max_length == 64 and s.keep_sdk_spans
    assert s.notification_spans == "events" and not s.inject


def test_kwargs_win_over_environment() -> None:
    s = load_settings({"capture_content": False, "excluded_methods": ["a/*"]}, {"OTEL_PYTHON_ACP_CAPTURE_CONTENT": "1"})
    assert not s.capture_content
    assert s.excluded_methods == MethodMatcher(("a/*",))  # the keyword's patterns only


def test_invalid_values_use_defaults(caplog) -> None:
    env = {
        "OTEL_PYTHON_ACP_CAPTURE_CONTENT": "perhaps",
        "OTEL_PYTHON_ACP_CAPTURE_CONTENT_MAX_LENGTH": "lots",
        "OTEL_PYTHON_ACP_NOTIFICATION_SPANS": "some",
        "OTEL_PYTHON_ACP_MAX_EVENTS_PER_SPAN": "0",
        "OTEL_PYTHON_ACP_TOOL_SPANS": "sometimes",
    }
    s = load_settings({"excluded_methods": 42, "unknown_option": 1}, env)
    assert s == Settings()
    warned = " | ".join(r.getMessage() for r in caplog.records if r.name == "acp_otel")
    for name in (*env, "excluded_methods", "unknown_option"):
        assert name in warned, name
    # The values as a user writes them, not Python reprs of tuples and booleans.
    assert "CAPTURE_CONTENT (expected true or false); using false" in warned
    assert "TOOL_SPANS (expected one of auto, always, never); using auto" in warned
    assert "('" not in warned and "False" not in warned


def test_method_matcher_wildcards_are_exact() -> None:
    m = MethodMatcher(("_zed.dev/*", "session/?pdate", "a[b]"))
    assert m("_zed.dev/workspace/buffers") and m("session/update")
    assert not m("_zed.dev") and not m("session/updates") and not m("ab")
    assert m("a[b]")  # brackets are literal, not a character set


# Every boolean option, found from the Settings dataclass itself so that an option added later is covered too.
BOOL_OPTIONS = [f.name for f in dataclasses.fields(Settings) if f.type in ("bool", bool)]


def test_every_boolean_option_is_covered_below() -> None:
    # Options that default to on and off: an invalid value falling back to a constant cannot pass for both.
    assert {"capture_content", "keep_sdk_spans", "propagate_env", "inject", "flush_on_exit"} <= set(BOOL_OPTIONS)
    assert {getattr(Settings(), name) for name in BOOL_OPTIONS} == {True, False}


@pytest.mark.parametrize("name", BOOL_OPTIONS)
@pytest.mark.parametrize("invalid", ["perhaps", "2", "tru", "enabled", "-1"])
def test_invalid_boolean_keeps_the_default_and_warns(name: str, invalid: str, caplog: pytest.LogCaptureFixture) -> None:
    default = getattr(Settings(), name)
    env_name = _OPTIONS[name][0]
    with caplog.at_level(logging.WARNING, logger="acp_otel"):
        from_env = load_settings({}, {env_name: invalid})
        from_kwarg = load_settings({name: invalid}, {})
        from_other_type = load_settings({name: 2}, {})
    for settings in (from_env, from_kwarg, from_other_type):
        assert getattr(settings, name) is default
        assert settings == Settings()
    warnings = [r.getMessage() for r in caplog.records if r.name == "acp_otel" and r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings
    shown = "true" if default else "false"
    assert env_name in warnings[0] and repr(invalid) in warnings[0] and warnings[0].endswith(f"using {shown}")
    assert name in warnings[1] and repr(invalid) in warnings[1]


READABLE = [("true", True), (" ON ", True), ("Yes", True), ("1", True), ("false", False), ("Off", False), ("0", False)]


@pytest.mark.parametrize("name", BOOL_OPTIONS)
def test_every_boolean_option_reads_both_values(name: str, caplog: pytest.LogCaptureFixture) -> None:
    env_name = _OPTIONS[name][0]
    for text, value in READABLE:
        assert getattr(load_settings({}, {env_name: text}), name) is value, text
        assert getattr(load_settings({name: text}, {}), name) is value, text
        assert getattr(load_settings({name: not value}, {env_name: text}), name) is (not value)  # keyword wins
    assert getattr(load_settings({}, {env_name: "  "}), name) is getattr(Settings(), name)  # blank: unset
    assert not [r for r in caplog.records if r.name == "acp_otel"]
