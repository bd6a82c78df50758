"""Options: keyword arguments, then environment variables; invalid values fall back to defaults."""

from __future__ import annotations

from acp_otel._settings import MethodMatcher, Settings, load_settings


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
    assert s.excluded_methods.patterns == ("a/*",)


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


def test_method_matcher_wildcards_are_exact() -> None:
    m = MethodMatcher(("_zed.dev/*", "session/?pdate", "a[b]"))
    assert m("_zed.dev/workspace/buffers") and m("session/update")
    assert not m("_zed.dev") and not m("session/updates") and not m("ab")
    assert m("a[b]")  # brackets are literal, not a character set
