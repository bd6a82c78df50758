"""What a spawned agent is called and which interpreter it runs, from its command line: every kind of command
the module reads (interpreters, wrappers, shells, launchers, package runners, scripts of packages, the proxy)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from acp_otel import _child_env as ce


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # interpreters and their options
        (["python", "-X", "dev", "-W", "ignore", "a.py"], "a"),
        (["python", "-u", "-", "x.py"], "python"),
        (["python", "-cprint(1)"], "python"),
        (["python", "-m"], "python"),
        (["python", "-m", "pkg.cli.main"], "pkg"),
        (["python", "-m", ".."], "python"),
        (["python3.12", "-O", "-m", "acme.coder"], "coder"),
        (["pythonw.exe", "agent.pyw"], "agent.pyw"),
        (["Python3", "/srv/x/main.py"], "x"),
        (["node", "--inspect", "-r", "ts-node/register", "agent.ts"], "register"),
        (["node"], "node"),
        (["deno", "run", "x.ts"], "x"),
        (["deno", "run", "--allow-read", "/srv/agent/main.ts"], "agent"),
        (["bun", "run", "./src/agent.ts"], "agent"),
        (["bun", "run"], "bun"),
        (["bun", "x", "@google/gemini-cli@latest", "--experimental-acp"], "gemini-cli"),
        (["bun", "x", "--bun", "opencode-ai", "acp"], "opencode-ai"),
        (["bun", "x"], "bun"),
        (["bun", "agent.ts"], "agent"),
        (["bun.exe", "./src/index.ts"], "index"),
        (["node", "/opt/tools/dist/main.mjs"], "tools"),
        (["node", "dist/lib/index.js"], "index"),
        (["python", "-c", "import agent", "x.py"], "python"),
        (["python", "-cimport agent", "x.py"], "python"),
        (["python", "-mhttp.server"], "server"),
        (["python", "-mmain"], "main"),
        (["python", "-ma"], "a"),
        (["python", "-c1", "x.py"], "python"),
        (["python", "-m", "a.cli.x"], "x"),
        (["python", "/dist/main.py"], "main"),
        (["node", "/dist/../index.js"], "index"),
        (["python", ".py"], ".py"),
        (["node", "-m", "acp_otel", "proxy", "--", "x"], "acp_otel"),
        (["/dist/main.exe"], "main"),
        (["/usr/bin/codeX"], "codeX"),
        # wrappers
        (["pipenv", "run", "a.py"], "a"),
        (["pdm", "run", "python", "b.py"], "b"),
        (["hatch", "run", "c"], "c"),
        (["rye", "run", "d"], "d"),
        (["pipx", "run", "kimi-cli"], "kimi-cli"),
        (["yarn", "dlx", "create-agent@2"], "create-agent"),
        (["pnpm", "x", "agent-pkg"], "agent-pkg"),
        (["npm", "run", "start"], "start"),
        (["make", "exec", "tool@1"], "make"),
        (["opentelemetry-instrument", "--traces_exporter", "otlp", "--x=1", "gemini", "--acp"], "gemini"),
        (["opentelemetry-instrument", "--service_name", "s", "gemini"], "gemini"),
        (["env", "--chdir", "/tmp", "gemini"], "gemini"),
        (["env", "-S", "python", "agent.py"], "agent"),
        (["cargo", "run", "agent"], "cargo"),
        (["uvx", "--", "-dash-agent"], "-dash-agent"),
        (["uvx", "--from", "x", "--", "pkg", "more"], "pkg"),
        (["npx", "@scope"], "acp-agent"),
        (["uvx", "git+ssh://git@github.com/o/repo.git"], "repo"),
        (["bunx", "https://user@example.com/pkgs/tool.tgz"], "tool.tgz"),
        (["bash", "-c", "python agent.py"], "agent"),
        (["sh", "-c", "$0 agent.py", "python", "other.py"], "agent"),
        (["bash", "-c", "A=1"], "bash"),
        (["bash", "-c", "=x agent"], "=x"),
        (["bash", "-c", "exec $AGENT --acp"], "bash"),
        (["sh", "/usr/bin/env", "gemini"], "gemini"),
        (["env", "-u", "X", "-C", "/tmp", "--unset", "Y", "-i", "A=1", "gemini", "--acp"], "gemini"),
        (["env", "-S", "codex-acp --x", "more"], "codex-acp"),
        (["env", "--split-string", "qwen --acp"], "qwen"),
        (["env", "-S"], "env"),
        (["env", "-S", "A=1 B=2 qwen --acp"], "qwen"),
        (["env", "-S", "-i A=1 gemini"], "gemini"),
        (["env", "A=1"], "env"),
        (["env", "=x"], "=x"),
        (["opentelemetry-instrument", "--traces_exporter", "otlp", "--x=1", "python", "a.py"], "a"),
        (["opentelemetry-instrument", "--", "gemini"], "gemini"),
        (["opentelemetry-instrument", "--traces_exporter", "otlp"], "opentelemetry-instrument"),
        (["uv", "run", "--with", "x", "--frozen", "agent.py"], "agent"),
        (["uv", "run", "--", "kimi"], "kimi"),
        (["uv", "run"], "uv"),
        (["uv", "sync"], "uv"),
        (["poetry", "run", "python", "-m", "bot"], "bot"),
        (["pnpm", "dlx", "@zed-industries/claude-code-acp@latest"], "claude-code-acp"),
        (["npm", "exec", "--", "some-agent@1.2"], "some-agent"),
        (["yarn", "x"], "yarn"),
        (["npx", "-y", "--package", "p", "@scope/pkg@1"], "pkg"),
        (["npx"], "npx"),
        (["uvx", "--from", "kimi-cli==1.0", "kimi-cli[x]>=2"], "kimi-cli"),
        (["uvx", "git+https://github.com/o/repo.git"], "repo"),
        (["bunx", "https://example.com/pkgs/tool.tgz"], "tool.tgz"),
        # shells
        (["bash", "-lc", "exec A=1 gemini --acp"], "gemini"),
        (["sh", "-c"], "sh"),
        (["sh", "-c", "unterminated 'quote"], "sh"),
        (["zsh", "-c", 'exec "${2}"', "zero", "one", "two-agent"], "two-agent"),
        (["sh", "-c", "$1 --acp", "_", "/bin/goose"], "goose"),
        (["sh", "-c", 'exec "$*"', "_", "crush", "acp"], "crush"),
        (["dash", "-c", "$3", "_", "a"], "dash"),
        (["bash", "--norc", "-e", "agent.sh", "--x"], "agent"),
        (["bash", "--norc"], "bash"),
        # the proxy
        (["acp-otel", "proxy", "--", "gemini"], "gemini-proxy"),
        (["acp-otel.exe", "proxy", "--agent-telemetry"], "acp-agent-proxy"),
        (["acp-otel", "--version"], "acp-otel"),
        (["python", "-m", "acp_otel", "proxy", "--", "qwen"], "qwen-proxy"),
        (["python", "-m", "acp_otel.cli", "proxy", "--", "env", "A=1", "goose"], "goose-proxy"),
        # plain binaries
        (["/usr/local/bin/gemini"], "gemini"),
        (["C:\\tools\\agent.CMD"], "agent"),
        ([".exe"], ".exe"),
        (["/opt/claude/bin/"], "claude"),
        (["./app/"], "app"),
    ],
)
def test_service_names_of_commands(command: list[str], expected: str) -> None:
    assert ce.service_name_for_command(command[0], command[1:]) == expected


@pytest.mark.parametrize(
    "wrapper",
    [["env"], ["opentelemetry-instrument"], ["uv", "run"], ["bash"], ["acp-otel", "proxy", "--"]],
)
def test_wrappers_are_unwrapped_five_deep(wrapper: list[str]) -> None:
    suffix = "-proxy" if wrapper[0] == "acp-otel" else ""
    tail = ["/usr/bin/env.exe", "gemini"]  # a sixth wrapper: named after itself, without its suffix
    assert ce.service_name_for_command(*_split(wrapper * 4 + tail)) == "gemini" + suffix * 4
    assert ce.service_name_for_command(*_split(wrapper * 5 + tail)) == "env" + suffix * 5


def _split(command: list[str]) -> tuple[str, list[str]]:
    return command[0], command[1:]


# ---------------------------------------------------------------------- scripts of packages, profiles


def test_a_generic_script_is_named_after_its_packages_manifest(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@qwen-code" / "qwen-code"
    (package / "dist").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@qwen-code/qwen-code", "version": "1"}))
    script = str(package / "dist" / "index.js")
    assert ce.service_name_for_command("node", [script]) == "qwen-code"
    assert ce.service_name_for_command(str(package / "dist" / "main"), []) == "qwen-code"
    assert ce.service_name_for_command("python", [str(package / "dist" / "cli.py")]) == "qwen-code"
    entry = str(package / "cli-entry.js")  # not generic, but a known agent's package: named after the agent
    assert ce.service_name_for_command("node", ["--x", entry]) == "qwen-code"
    assert ce.command_name(["node", "--x", entry]) == "qwen-code"
    assert ce.command_name(["python3", entry]) == "qwen-code"
    assert ce.command_name(["wrapper-tool", entry]) == "wrapper-tool"  # not an interpreter: its own name
    assert ce.command_name(["node", str(package / "gemini.js")]) == "gemini"  # a known agent by its own name
    assert ce.command_name(["node", "--x"]) == "node"
    (package / "package.json").write_text(json.dumps({"name": "unknown-tool"}))
    assert ce.command_name(["node", entry]) == "cli-entry"  # a package of no known agent: the script's name
    for manifest in ("{not json", "[1]", json.dumps({"name": "  "}), json.dumps({"name": 3}), json.dumps({})):
        (package / "package.json").write_text(manifest)  # unreadable or nameless: the directory above dist
        assert ce.service_name_for_command("node", [script]) == "qwen-code", manifest
    (package / "package.json").unlink()
    (package / "package.json").mkdir()  # not a file: looked past
    assert ce.service_name_for_command("node", [script]) == "qwen-code"


def test_a_manifest_is_looked_for_six_directories_up_at_most(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"name": "far-away"}))
    deep = tmp_path / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    assert ce.service_name_for_command("node", [str(deep / "index.js")]) == "f"  # six up: not read
    assert ce.service_name_for_command("node", [str(deep.parent / "index.js")]) == "far-away"  # the sixth


def test_what_a_command_goes_by_when_it_is_not_a_command() -> None:
    assert ce.command_name([]) is None and ce.command_name(None) is None and ce.command_name(["node", 3]) is None
    assert ce.command_name(["npx", "-y", "@google/gemini-cli"]) == "gemini-cli"
    assert ce.proxy_service_name(["npx", "-y", "@google/gemini-cli"]) == "gemini-cli-proxy"
    assert ce.proxy_service_name([]) == "acp-agent-proxy"
    assert ce.proxy_service_name(["python", "agent.py"]) == "agent-proxy"
    assert ce.service_name_for_command("", []) == "acp-agent"


def test_resource_attributes_without_the_service_name() -> None:
    value = "service.name=editor, team = x ,=orphan,noequals,service%2Ename=e2,k=a=b"
    assert ce.has_service_name(value) and ce.has_service_name("service%2Ename=x")
    assert ce.has_service_name("service.name=a=b")
    assert not ce.has_service_name("team=x,service.names=y") and not ce.has_service_name("")
    assert ce.without_service_name(value) == "team=x,k=a=b"


# ---------------------------------------------------------------------- the child's interpreter


def _interpreter(prefix: Path, name: str = "python3.11", venv: bool = True) -> Path:
    (prefix / "bin").mkdir(parents=True)
    if venv:
        (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    executable = prefix / "bin" / name
    executable.write_text("")
    executable.chmod(0o755)
    return executable


def _script(path: Path, first_line: str) -> str:
    path.write_bytes(f"{first_line}\nprint(1)\n".encode("utf-8", "surrogateescape"))
    path.chmod(0o755)
    return str(path)


def test_the_child_runs_this_environment_only_with_its_interpreter(tmp_path: Path) -> None:
    python = _interpreter(tmp_path / "venv")
    other = _interpreter(tmp_path / "other")
    bin_dir = str(python.parent)
    this = str(python)
    assert ce.sitecustomize_belongs(this, ["agent.py"], this)
    assert not ce.sitecustomize_belongs(str(other), ["agent.py"], this)
    assert ce.sitecustomize_belongs("python3.11", [], this, path_env=bin_dir)  # found on PATH
    assert not ce.sitecustomize_belongs("python3.11", [], this, path_env=str(tmp_path / "nowhere"))
    assert not ce.sitecustomize_belongs(this, ["-m", "acp_otel", "proxy", "--", "agent"], this)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for first_line, belongs in (
        (f"#!{this}", True),
        (f"#! {this} -u", True),
        ("#!/usr/bin/env python3.11", True),  # env: looked up on PATH
        ("#!/usr/bin/env -S python3.11 -u", True),
        ("#!/usr/bin/env", False),
        ("#!/usr/bin/env node", False),
        (f"#!{other}", False),
        ("#!/bin/sh", False),
        ("#!", False),
        ("# no interpreter line", False),
        ("#!" + " " * (511 - len(this)) + this, False),  # the line is read to its 512th byte: cut short
        ("#!" + " " * (510 - len(this)) + this, True),
        (f"#!{this} \udcff", True),  # not UTF-8 past the interpreter: read anyway
    ):
        script = _script(scripts / "agent", first_line)
        assert ce.sitecustomize_belongs(script, [], this, path_env=bin_dir) is belongs, first_line
    _script(scripts / "on-path", f"#!{this}")
    assert ce.sitecustomize_belongs("on-path", [], this, path_env=str(scripts))
    assert not ce.sitecustomize_belongs(str(scripts), [], this)  # a directory


def test_an_interpreter_outside_a_virtual_environment_belongs_to_its_prefix(tmp_path: Path) -> None:
    python = _interpreter(tmp_path / "usr", venv=False)
    link = tmp_path / "elsewhere" / "bin" / "python3"
    link.parent.mkdir(parents=True)
    link.symlink_to(python)
    assert ce.sitecustomize_belongs(str(link), [], str(python))  # the real executable's prefix
    assert not ce.sitecustomize_belongs(str(_interpreter(tmp_path / "venv")), [], str(python))


def _site(prefix: Path, version: str = "3.11") -> str:
    site = prefix / "lib" / f"python{version}" / "site-packages" / "opentelemetry" / "instrumentation"
    (site / "auto_instrumentation").mkdir(parents=True)
    return str(site / "auto_instrumentation")


def test_opentelemetrys_sitecustomize_stays_on_pythonpath_only_for_its_interpreter(tmp_path: Path) -> None:
    python = _interpreter(tmp_path / "venv")
    plain = _interpreter(tmp_path / "plain", name="python")
    own, newer, elsewhere = _site(tmp_path / "venv"), _site(tmp_path / "venv", "3.12"), _site(tmp_path / "other")
    path = os.pathsep.join([own, "/app", newer, elsewhere])

    def pythonpath(command: list[str], value: str = path) -> str | None:
        return ce.proxy_agent_environment({"PYTHONPATH": value, "PATH": str(python.parent)}, command).get("PYTHONPATH")

    assert pythonpath([str(python), "agent.py"]) == os.pathsep.join([own, "/app"])
    assert pythonpath(["python3.11", "agent.py"]) == os.pathsep.join([own, "/app"])  # found on the agent's PATH
    assert pythonpath(["gemini"]) == "/app"
    assert pythonpath(["acp-otel", "proxy", "--", str(python), "a.py"]) == "/app"
    assert pythonpath([str(python), "-m", "acp_otel", "proxy", "--", "a"]) == "/app"
    assert pythonpath(["gemini"], elsewhere) is None  # nothing left: no PYTHONPATH at all
    assert pythonpath([str(plain)], _site(tmp_path / "plain", "3.9")) is not None  # no version to go by: its prefix
    assert pythonpath([str(python)], "/app") == "/app"
    assert ce.proxy_agent_environment({"PYTHONPATH": own}, []).get("PYTHONPATH") == own


def test_a_script_of_a_known_agents_package_goes_by_the_agents_name(tmp_path: Path) -> None:
    # Qwen Code started by its script path, behind wrappers: its profile is found (and its service so named).
    package = tmp_path / "node_modules" / "@qwen-code" / "qwen-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@qwen-code/qwen-code"}))
    script = str(package / "cli-entry.js")
    for command in (
        ["node", script],
        ["node", "--no-warnings", script, "--acp"],
        ["env", "A=1", "node", script],
        ["python3", script],
    ):
        assert ce.command_name(command) == "qwen-code", command
    other = tmp_path / "node_modules" / "some-tool"
    other.mkdir(parents=True)
    (other / "package.json").write_text(json.dumps({"name": "some-tool"}))
    assert ce.command_name(["node", str(other / "cli-entry.js")]) == "cli-entry"  # not a known agent's package
    gemini = package / "gemini.js"  # a script named after another known agent keeps its own name
    assert ce.command_name(["node", str(gemini)]) == ce.command_name(["python", str(gemini)]) == "gemini"
