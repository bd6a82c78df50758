"""What a spawned ACP agent inherits of the OpenTelemetry configuration, and what it is called.

Pure helpers (``os``, ``re``, ``shlex`` only): the proxy imports this module before it starts its agent,
so nothing heavy may be imported here. Used by the SDK spawn wrapper (:mod:`acp_otel._spawn`, editor
→ agent or editor → proxy) and by the proxy (proxy → agent).

Rules, per hop:

* ``OTEL_*`` variables cross, except that ``console`` is removed from ``OTEL_TRACES_EXPORTER``,
  ``OTEL_METRICS_EXPORTER`` and ``OTEL_LOGS_EXPORTER`` (``none`` when nothing is left): a stdio
  agent's stdout is the protocol, and a console exporter in any language writes there;
* from the proxy to its agent, the proxy's exporter settings never cross (endpoints, headers: the backend's
  credentials); with ``--agent-telemetry`` the agent's own telemetry is pointed at the proxy's receiver;
* ``service.name`` is per hop: named after what the child runs (:func:`service_name_for_command`),
  never inherited from the parent; a child that is ``acp-otel proxy`` gets none (it names itself
  ``<agent>-proxy`` and its agent ``<agent>``);
* opentelemetry's ``sitecustomize`` directory goes on ``PYTHONPATH`` only for a child that runs the
  same Python environment it belongs to (:func:`sitecustomize_belongs`), never for the proxy.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from urllib.parse import unquote

TYPE_CHECKING = False  # not typing's: this module is imported before the agent starts (type checkers see True)
if TYPE_CHECKING:
    from typing import Any

ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
ENV_PYTHONPATH = "PYTHONPATH"
EXPORTER_VARIABLES = ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER")
PROXY_SUFFIX = "-proxy"
DEFAULT_NAME = "acp-agent"

_PYTHON_RE = re.compile(r"^(python|pypy)[0-9.]*(w)?(\.exe)?$", re.IGNORECASE)
_NODE_RE = re.compile(r"^(node|nodejs|bun|deno)(\.exe)?$", re.IGNORECASE)
_SHELL_RE = re.compile(r"^(ba|da|z|k|fi)?sh(\.exe)?$", re.IGNORECASE)
# Python options that take a separate argument (`python -X dev agent.py`).
_PYTHON_OPTS_WITH_ARG = frozenset({"-X", "-W"})
_EXECUTABLE_SUFFIXES = (".exe", ".cmd", ".bat", ".py", ".js", ".mjs", ".cjs", ".ts", ".sh")
# Script or module names that say nothing about the program (`dist/index.js`, `python -m pkg.cli`).
_GENERIC_NAMES = frozenset({"index", "main", "cli", "__main__", "bin", "entry", "entrypoint", "run", "start", "app"})
# Directories under a package that hold its entry point (`pkg/dist/index.js`).
_BUILD_DIRS = frozenset({"dist", "lib", "build", "out", "bin", "src", "cjs", "esm", "node_modules", ".bin"})
# Launchers that run a package by name: the first non-option argument names it.
_PACKAGE_RUNNERS = frozenset({"npx", "bunx", "uvx", "pnpx"})
# Launcher options that take a separate argument.
_RUNNER_OPTS_WITH_ARG = frozenset(
    {
        "-p",
        "--package",
        "--from",
        "--with",
        "--python",
        "--project",
        "--directory",
        "--env-file",
        "--extra",
        "--group",
        "--index",
        "--index-url",
        "-c",
        "--call",
        "--registry",
        "--cache",
    }
)
_PROXY_NAMES = frozenset({"acp-otel", "acp-otel.exe"})


# ------------------------------------------------------------------ service names


def service_name_for_command(command: str, args: Sequence[str] = ()) -> str:
    """The ``service.name`` of a spawned process, derived from its command line.

    ``python agent.py`` -> ``agent``; ``python -m my_pkg.agent`` -> ``agent`` (``python -m kimi_cli.cli``
    -> ``kimi_cli``: a generic last part gives way to the package); ``node dist/agent.js`` -> ``agent``;
    ``node .../claude-agent-acp/dist/index.js`` -> ``claude-agent-acp`` (a generic script name gives way
    to its package: the ``name`` of the nearest ``package.json``, else the directory above the build
    directory; so does the script of a known agent's package: ``node .../@qwen-code/qwen-code/cli-entry.js``
    -> ``qwen-code``); wrappers are unwrapped: ``env A=1 CMD``, ``bash -c "CMD"``, ``uv run CMD``; package
    runners name the package: ``npx -y @scope/pkg@1`` -> ``pkg``, ``uvx kimi-cli`` -> ``kimi-cli``;
    ``acp-otel proxy -- CMD`` -> ``<CMD's name>-proxy``; a plain binary -> its basename without
    directory or ``.exe``-like suffix (``/usr/local/bin/gemini`` -> ``gemini``); ``opentelemetry-instrument
    CMD`` is named after CMD. A Python or Node
    interpreter without a script falls back to the interpreter's name.
    """
    return _derive(command, list(args), 0) or DEFAULT_NAME


def _derive(command: str, args: list[str], depth: int) -> str:
    base = _basename(command)
    name = _strip_suffix(base)
    if depth > 4:  # wrappers of wrappers of ...: stop somewhere
        return name or base
    lower = name.lower()
    proxied = proxy_agent_command(command, args)
    if proxied is not None:
        return (_derive(proxied[0], list(proxied[1:]), depth + 1) if proxied else DEFAULT_NAME) + PROXY_SUFFIX
    if _PYTHON_RE.match(base):
        return _python_target(args) or name
    if lower in ("bun", "deno") and args[:1] in (["x"], ["run"]):  # `bun x PKG` (bunx); `bun run` / `deno run` FILE
        if args[0] == "x":
            rest = _skip_options(args[1:])
            return _package_name(rest[0]) if rest else name
        return _node_target(args[1:]) or name
    if _NODE_RE.match(base):
        return _node_target(args) or name
    if lower == "opentelemetry-instrument":  # its options all take a value: `--traces_exporter otlp`
        rest = list(args)
        while rest and rest[0].startswith("-"):
            rest = rest[1:] if "=" in rest[0] or rest[0] == "--" else rest[2:]
        return _derive(rest[0], rest[1:], depth + 1) if rest else name
    if lower == "env":
        rest = _after_env(args)
        return _derive(rest[0], rest[1:], depth + 1) if rest else name
    if _SHELL_RE.match(base):
        inner = _shell_command(args)
        if inner:
            return _derive(inner[0], inner[1:], depth + 1)
        return name
    if lower in ("uv", "poetry", "pipenv", "pdm", "hatch", "rye") and args[:1] == ["run"]:
        rest = _skip_options(args[1:])
        return _derive(rest[0], rest[1:], depth + 1) if rest else name
    if lower in ("pipx", "pnpm", "yarn", "npm") and args[:1] in (["run"], ["dlx"], ["exec"], ["x"]):
        rest = _skip_options(args[1:])
        return _package_name(rest[0]) if rest else name
    if lower in _PACKAGE_RUNNERS:
        rest = _skip_options(args)
        return _package_name(rest[0]) if rest else name
    if lower in _GENERIC_NAMES:
        return _package_of_script(command) or name or base
    return name or base


def command_name(command: Any) -> str | None:
    """The name an agent command goes by, to look its profile up: as ``service.name`` derives it (``npx -y
    @scope/pkg`` -> ``pkg``; a script of a known agent's package by the package:
    ``node .../node_modules/@qwen-code/qwen-code/cli-entry.js`` -> ``qwen-code``)."""
    if not command or not all(type(part) is str for part in command):
        return None
    return service_name_for_command(command[0], command[1:])


def proxy_service_name(agent_command: Sequence[str]) -> str:
    """The default ``service.name`` of ``acp-otel proxy -- CMD``: ``<CMD's name>-proxy``."""
    agent = service_name_for_command(agent_command[0], agent_command[1:]) if agent_command else DEFAULT_NAME
    return agent + PROXY_SUFFIX


def _basename(path: str) -> str:
    return re.split(r"[\\/]", path.rstrip("/\\"))[-1] if path else ""


def _strip_suffix(name: str) -> str:
    lower = name.lower()
    for suffix in _EXECUTABLE_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _skip_options(args: Sequence[str]) -> list[str]:
    """``args`` from the first one that is not a launcher option (or an option's value)."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return list(args[index + 1 :])
        if not arg.startswith("-"):
            return list(args[index:])
        index += 2 if arg in _RUNNER_OPTS_WITH_ARG else 1
    return []


def _after_env(args: Sequence[str]) -> list[str]:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string"):
            if arg in ("-S", "--split-string") and index + 1 < len(args):  # its words may begin with NAME=VALUE
                return _after_env(shlex.split(args[index + 1]) + list(args[index + 2 :]))
            index += 2
        elif arg.startswith("-") or ("=" in arg and not arg.startswith("=")):
            index += 1
        else:
            return list(args[index:])
    return []


_POSITIONAL_RE = re.compile(r"^\$(?:(\d)|\{(\d+)\}|([@*])|\{([@*])\})$")


def _shell_command(args: Sequence[str]) -> list[str]:
    """The command of ``sh -c "CMD ..."`` (also ``-lc``), without a leading ``exec``; ``[]`` otherwise.

    Positional parameters are those after the string: ``bash -c 'exec "$@"' _ CMD ARGS`` runs ``CMD ARGS``. A
    command that is some other expansion (``$AGENT``) says nothing of the agent: ``[]``.
    """
    for index, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            if index + 1 >= len(args):
                return []
            try:
                words = shlex.split(args[index + 1])
            except ValueError:
                return []
            positional = list(args[index + 2 :])  # $0, $1, ...
            expanded: list[str] = []
            for word in words:
                match = _POSITIONAL_RE.match(word)
                if match is None:
                    expanded.append(word)
                elif match.group(3) or match.group(4):  # $@ / $*: $1 and on
                    expanded.extend(positional[1:])
                else:
                    number = int(match.group(1) or match.group(2))
                    expanded.extend(positional[number : number + 1])
            words = expanded
            while words and (words[0] == "exec" or ("=" in words[0] and not words[0].startswith("="))):
                words = words[1:]
            return [] if words and words[0].startswith("$") else words
        if not arg.startswith("-"):  # `sh script.sh`
            return [arg, *args[index + 1 :]]
    return []


def _package_name(spec: str) -> str:
    """``@scope/pkg@1.2`` -> ``pkg``; ``kimi-cli==1.0`` -> ``kimi-cli``; ``git+https://.../repo.git`` -> ``repo``."""
    spec = spec.strip()
    if spec.startswith("@"):
        spec = spec.split("/", 1)[-1]
    spec = re.split(r"[@=<>!~\[;]", spec, maxsplit=1)[0] if not spec.startswith(("git+", "http")) else spec
    return _strip_suffix(_basename(spec.removesuffix(".git"))) or spec


def _python_target(args: Sequence[str]) -> str | None:
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        module = None
        if arg == "-m":
            module = args[index + 1] if index + 1 < len(args) else ""
        elif arg.startswith("-m") and len(arg) > 2:
            module = arg[2:]
        if module is not None:
            parts = [p for p in module.split(".") if p]
            while len(parts) > 1 and parts[-1] in _GENERIC_NAMES:
                parts.pop()
            return parts[-1] if parts else None
        if arg == "-c" or (arg.startswith("-c") and len(arg) > 2):
            return None
        if arg in _PYTHON_OPTS_WITH_ARG:
            skip = True
            continue
        if arg == "-":
            return None
        if arg.startswith("-"):
            continue
        name = _strip_suffix(_basename(arg))
        if name in _GENERIC_NAMES:
            return _package_of_script(arg) or name or None
        return _known_agent_package(name, arg) or name or None
    return None


def _node_target(args: Sequence[str]) -> str | None:
    for arg in args:
        if arg.startswith("-"):
            continue
        name = _strip_suffix(_basename(arg))
        if name.lower() in _GENERIC_NAMES:
            return _package_of_script(arg) or name or None
        return _known_agent_package(name, arg) or name or None
    return None


def _known_agent_package(name: str, script: str) -> str | None:
    """The package ``script`` belongs to when that is a known agent's and the script's own ``name`` is not
    (``node …/@qwen-code/qwen-code/cli-entry.js`` -> ``qwen-code``): the service is named after the agent."""
    from ._agent_switches import key_of  # here: a light data module, needed only for scripts

    if key_of(name) is not None:
        return None
    package = _package_of_script(script)
    return package if package and key_of(package) is not None else None


def _package_of_script(script: str) -> str | None:
    """The package a generically named script belongs to: the nearest ``package.json``'s ``name`` (on
    disk), else the first directory above it that is not a build directory (``pkg/dist/index.js``)."""
    parts = [p for p in re.split(r"[\\/]", script) if p]
    directory = os.path.dirname(os.path.abspath(script))
    for _ in range(6):
        manifest = os.path.join(directory, "package.json")
        if os.path.isfile(manifest):
            name = _manifest_name(manifest)
            if name:
                return _package_name(name)
            break
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    for part in reversed(parts[:-1]):
        if part.lower() not in _BUILD_DIRS and part not in (".", ".."):
            return _strip_suffix(part) or None
    return None


def _manifest_name(path: str) -> str | None:
    import json

    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle).get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value.strip() else None


def proxy_agent_command(command: str, args: Sequence[str]) -> tuple[str, ...] | None:
    """The agent command of ``acp-otel proxy [options] -- CMD`` (also ``python -m acp_otel.cli proxy``),
    ``None`` when ``command`` is not the proxy."""
    args = list(args)
    if _basename(command) in _PROXY_NAMES:
        rest = args
    elif _PYTHON_RE.match(_basename(command)) and args[:2] in (["-m", "acp_otel.cli"], ["-m", "acp_otel"]):
        rest = args[2:]
    else:
        return None
    if rest[:1] != ["proxy"]:
        return None
    rest = rest[1:]
    return tuple(rest[rest.index("--") + 1 :]) if "--" in rest else ()


# ------------------------------------------------------------------ sitecustomize


def _environment_of_interpreter(executable: str) -> tuple[str, str]:
    """(environment prefix, real interpreter) of a Python executable: a virtual environment is the
    directory holding ``pyvenv.cfg``, otherwise the prefix of the real executable."""
    path = os.path.abspath(executable)
    venv = os.path.dirname(os.path.dirname(path))
    real = os.path.realpath(path)
    if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return os.path.realpath(venv), real
    return os.path.dirname(os.path.dirname(real)), real


def _interpreter_of(command: str, path_env: str | None) -> str | None:
    """The Python interpreter ``command`` runs: itself if it is one, else its script's ``#!`` line."""
    if os.sep in command:
        found: str | None = command
    else:
        import shutil  # here: shutil's imports (compression modules) are not needed before the agent starts

        found = shutil.which(command, path=path_env)
    if not found or not os.path.isfile(found):
        return None
    if _PYTHON_RE.match(_basename(found)):
        return found
    try:
        with open(found, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if words and _basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        return _interpreter_of(words[0], path_env) if words and _PYTHON_RE.match(_basename(words[0])) else None
    return words[0] if words and _PYTHON_RE.match(_basename(words[0])) else None


def sitecustomize_belongs(command: str, args: Sequence[str], this_executable: str, path_env: str | None = None) -> bool:
    """Whether opentelemetry's ``sitecustomize`` of the interpreter ``this_executable`` may be handed to
    the child ``command``: only when the child runs the same interpreter in the same environment (a
    Python interpreter, or a script whose ``#!`` names one), and is not ``acp-otel proxy``."""
    if proxy_agent_command(command, args) is not None:
        return False
    child = _interpreter_of(command, path_env)
    if child is None:
        return False
    return _environment_of_interpreter(child) == _environment_of_interpreter(this_executable)


def is_sitecustomize_dir(entry: str) -> bool:
    """``entry`` is opentelemetry's auto-instrumentation directory (what ``opentelemetry-instrument`` adds)."""
    parts = [p for p in re.split(r"[\\/]", entry) if p]
    return parts[-3:] == ["opentelemetry", "instrumentation", "auto_instrumentation"]


# ------------------------------------------------------------------ environments


def without_console(value: str) -> str:
    """An exporter list without ``console``: ``"console,otlp"`` -> ``"otlp"``, ``"console"`` -> ``"none"``."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    kept = [n for n in names if n.lower() != "console"]
    if len(kept) == len(names):
        return value
    return ",".join(kept) or "none"


def _split_resource_attributes(value: str) -> list[tuple[str, str]]:
    pairs = []
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if sep and key.strip():
            pairs.append((key.strip(), val.strip()))
    return pairs


def has_service_name(resource_attributes: str | None) -> bool:
    """Whether an ``OTEL_RESOURCE_ATTRIBUTES`` value sets ``service.name``."""
    if not resource_attributes:
        return False
    return any(unquote(k) == "service.name" for k, _ in _split_resource_attributes(resource_attributes))


def without_service_name(resource_attributes: str) -> str:
    """An ``OTEL_RESOURCE_ATTRIBUTES`` value without its ``service.name``."""
    pairs = _split_resource_attributes(resource_attributes)
    return ",".join(f"{k}={v}" for k, v in pairs if unquote(k) != "service.name")


def no_console(env: dict[str, str]) -> None:
    """Remove ``console`` from the exporter variables of ``env`` (in place)."""
    for name in EXPORTER_VARIABLES:
        if name in env:
            env[name] = without_console(env[name])


# The proxy's own exporter configuration: endpoints, headers (the backend's credentials), certificates and client
# keys, protocol, compression, timeouts. Never the agent's: an endpoint alone switches some agents' own export on
# (OpenCode's), straight to the backend.
PROXY_ONLY_PREFIXES = ("OTEL_EXPORTER_", "OTEL_PYTHON_EXPORTER_")
ENV_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
# Python's GenAI instrumentations read this; content stays off at the agent unless the proxy captures content.
# NO_CONTENT, not "false": the older instrumentations read a boolean (anything but "true" is off), the newer ones
# (opentelemetry-util-genai, in its experimental mode) an enum, and warn on "false" before falling back to off.
ENV_GENAI_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
GENAI_CONTENT_OFF = "NO_CONTENT"


def is_proxy_only(name: str) -> bool:
    """Whether an environment variable is part of the proxy's exporter configuration (never given to its agent)."""
    return name.upper().startswith(PROXY_ONLY_PREFIXES)


def proxy_agent_environment(
    environ: Mapping[str, str],
    command: Sequence[str],
    *,
    telemetry_endpoint: str | None = None,
    capture_content: bool = False,
) -> dict[str, str]:
    """The environment ``acp-otel proxy`` gives its agent.

    Its own, without its exporter configuration (:func:`is_proxy_only`: endpoints, headers, certificates: the
    backend's credentials stay in the proxy), with console exporters removed, the agent's service name derived
    from its command when the environment names none, and opentelemetry's ``sitecustomize`` left on
    ``PYTHONPATH`` only when it belongs to the agent's interpreter.

    ``telemetry_endpoint`` (``http://127.0.0.1:<port>``, the proxy's receiver) points the agent's own telemetry
    there: the standard OTLP endpoint and protocol, plus the switches of the agent its command names
    (:mod:`acp_otel._agent_switches`), replacing what the proxy's environment holds;
    its content switches follow ``capture_content`` (the proxy's content-capture setting). What the command sets
    itself (``env VAR=VALUE agent ...``) is applied by the command after all this, so it wins.
    """
    env = {k: v for k, v in environ.items() if not is_proxy_only(k)}
    no_console(env)
    if command and not env.get(ENV_SERVICE_NAME) and not has_service_name(env.get(ENV_RESOURCE_ATTRIBUTES)):
        env[ENV_SERVICE_NAME] = service_name_for_command(command[0], command[1:])
    python_path = env.get(ENV_PYTHONPATH)
    if python_path and command:
        entries = python_path.split(os.pathsep)
        foreign = [e for e in entries if is_sitecustomize_dir(e) and not _site_dir_belongs(e, command, env)]
        if foreign:
            kept = [e for e in entries if e not in foreign]
            if kept:
                env[ENV_PYTHONPATH] = os.pathsep.join(kept)
            else:
                del env[ENV_PYTHONPATH]
    if telemetry_endpoint is not None:
        env.update(agent_telemetry_variables(command, telemetry_endpoint, capture_content, env))
    return env


def agent_telemetry_variables(
    command: Sequence[str], endpoint: str, capture_content: bool, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables that point an agent's own telemetry at ``endpoint``: the standard ones for any agent, and
    those of the agent ``command`` names (its profile), content switched as ``capture_content`` says; its JSON
    configuration switches merged into the value ``environ`` (the agent's environment) holds, which is left alone
    when it is not a JSON object."""
    # Here, not at the top: only with the option on (the agents' data, not the profiles: those import dataclasses).
    from ._agent_switches import CONFIG_SWITCHES, CONTENT_SWITCHES, ENDPOINT, SWITCHES, key_of, merged_config

    variables = {ENV_OTLP_ENDPOINT: endpoint, ENV_OTLP_PROTOCOL: "http/protobuf"}
    if not capture_content:
        variables[ENV_GENAI_CONTENT] = GENAI_CONTENT_OFF
    key = key_of(command_name(command)) or ""
    for name, value in SWITCHES.get(key, ()):
        variables[name] = value.replace(ENDPOINT, endpoint)
    for name, on, off in CONTENT_SWITCHES.get(key, ()):
        variables[name] = on if capture_content else off
    for name, config in CONFIG_SWITCHES.get(key, ()):
        merged = merged_config((environ or {}).get(name), config)
        if merged is not None:
            variables[name] = merged
    return variables


def _site_dir_belongs(site_dir: str, command: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether ``site_dir`` (``<prefix>/lib/pythonX.Y/site-packages/opentelemetry/...``) is in the
    environment of the interpreter that ``command`` runs."""
    child = _interpreter_of(command[0], env.get("PATH"))
    if child is None or proxy_agent_command(command[0], command[1:]) is not None:
        return False
    prefix, real = _environment_of_interpreter(child)
    site = os.path.realpath(site_dir)
    if not site.startswith(prefix.rstrip(os.sep) + os.sep):
        return False
    version = re.search(r"python(\d+\.\d+)", _basename(real))
    return version is None or f"python{version.group(1)}" in site.split(os.sep)
