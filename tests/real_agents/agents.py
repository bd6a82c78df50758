"""How each real agent is installed and run offline against the scripted model (``model_server.py``).

Each ``*_agent(home, model_url)`` writes the agent's configuration under ``home`` (a fresh temporary
directory) and returns its command line and environment, or skips the test with the reason it cannot run.
The npm agents come from ``tests/real_agents/package-lock.json`` (``npm install --no-save``), kimi-cli from PyPI (the
``real_agents`` nox session installs ``kimi-cli==1.52.0`` beside acp-otel).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
REPO = HERE.parent.parent

# Variables of this process that must not reach an agent (a test-runner's sandbox flag breaks Claude Code's
# session/new; OTEL_* would make a traced process export elsewhere).
_DROP_PREFIXES = ("OTEL_", "ANTHROPIC_", "OPENAI_", "CLAUDE", "CODEX_", "KIMI_", "QWEN_", "GEMINI_")
_DROP = {"IS_SANDBOX", "ACP_OTEL_TEST_SPANS", "PYTHONPATH"}


@dataclass
class Agent:
    """A real agent's command line and environment (the environment also reaches the proxy before it)."""

    name: str
    command: list[str]
    env: dict[str, str]
    # Seconds the editor waits, after closing the agent's stdin, before sending SIGTERM: agents that exit on
    # their own get long enough to do so under load; those that never do (Claude Code, codex) a short wait.
    grace: float = 45.0


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without provider/telemetry variables, with a private HOME, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP and not any(k.startswith(p) for p in _DROP_PREFIXES)}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    env.update(PYTHONPATH=str(REPO))  # the proxy (and an in-process traced agent) import acp_otel from here
    env.update(extra)
    return env


def _node_package(package: str, entry: str) -> Path:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    path = NODE_MODULES / package / entry
    if not path.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed")
        subprocess.run(
            [npm, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=HERE,
            check=True,
            timeout=600,
        )
    if not path.exists():
        pytest.skip(f"{package} has no {entry} after npm install")
    return path


def kimi_agent(home: Path, model_url: str, *, traced: bool = False) -> Agent:
    """kimi-cli 1.52.0 (Python >= 3.12): ``python -m kimi_cli.cli acp`` with an ``openai_legacy`` provider.

    ``traced``: run it through ``kimi_traced.py``, which instruments its ACP SDK with acp-otel in process.
    """
    if sys.version_info < (3, 12, 4):
        pytest.skip("kimi-cli needs Python >= 3.12 (3.12.1 cannot import it: slotted generic dataclasses)")
    try:
        import kimi_cli  # noqa: F401
    except ImportError:
        pytest.skip("kimi-cli is not installed (the real_agents nox session installs kimi-cli==1.52.0)")
    share = home / "kimi"
    (share / "credentials").mkdir(parents=True)
    (share / "config.toml").write_text(
        "\n".join(
            [
                'default_model = "scripted"',
                "telemetry = false",
                "[providers.local]",
                'type = "openai_legacy"',
                f'base_url = "{model_url}/v1"',
                'api_key = "dummy"',
                "[models.scripted]",
                'provider = "local"',
                'model = "scripted-model"',
                "max_context_size = 200000",
                "",
            ]
        )
    )
    # Its ACP server refuses session/new without a Kimi Code login; a placeholder token passes that gate and
    # is never sent (the model provider above has its own key).
    (share / "credentials" / "kimi-code.json").write_text(
        json.dumps(
            {
                "access_token": "placeholder",
                "refresh_token": "placeholder",
                "expires_at": time.time() + 10 * 365 * 86400,
                "scope": "",
                "token_type": "Bearer",
            }
        )
    )
    entry = [str(HERE / "kimi_traced.py")] if traced else ["-m", "kimi_cli.cli"]
    return Agent("kimi", [sys.executable, *entry, "acp"], clean_env(home, KIMI_SHARE_DIR=str(share)))


def claude_agent(home: Path, model_url: str) -> Agent:
    """Claude Code's ACP adapter 0.23.1: the Anthropic API at ``ANTHROPIC_BASE_URL``, no telemetry, no updates."""
    entry = _node_package("@zed-industries/claude-agent-acp", "dist/index.js")
    env = clean_env(
        home,
        ANTHROPIC_BASE_URL=model_url,
        ANTHROPIC_API_KEY="dummy",
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    return Agent("claude", [str(shutil.which("node")), str(entry)], env, grace=3.0)


def codex_agent(home: Path, model_url: str) -> Agent:
    """codex-acp 0.16.0: a custom model provider speaking the Responses API, approvals asked for."""
    entry = _node_package("@zed-industries/codex-acp", "bin/codex-acp.js")
    codex_home = home / "codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        "\n".join(
            [
                'model = "scripted-model"',
                'model_provider = "local"',
                'approval_policy = "untrusted"',
                'sandbox_mode = "danger-full-access"',
                "[model_providers.local]",
                'name = "local"',
                f'base_url = "{model_url}/v1"',
                'wire_api = "responses"',
                "request_max_retries = 0",
                "stream_max_retries = 0",
                "",
            ]
        )
    )
    env = clean_env(home, CODEX_HOME=str(codex_home))
    return Agent("codex", [str(shutil.which("node")), str(entry)], env, grace=3.0)


def qwen_agent(home: Path, model_url: str, telemetry_endpoint: str | None = None) -> Agent:
    """Qwen Code 0.24.4 (``cli-entry.js --acp``): an OpenAI-compatible provider; its own OTLP export if asked."""
    entry = _node_package("@qwen-code/qwen-code", "cli-entry.js")
    settings: dict[str, object] = {
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": "scripted-model"},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False},
    }
    if telemetry_endpoint is not None:
        settings["telemetry"] = {
            "enabled": True,
            "target": "local",
            "otlpEndpoint": telemetry_endpoint,
            "otlpProtocol": "http",
            "logPrompts": False,
        }
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    env = clean_env(
        home,
        OPENAI_API_KEY="dummy",
        OPENAI_BASE_URL=f"{model_url}/v1",
        OPENAI_MODEL="scripted-model",
        QWEN_CODE_DISABLE_PRECONNECT="1",
    )
    return Agent("qwen", [str(shutil.which("node")), str(entry), "--acp"], env)
