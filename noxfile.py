"""Compatibility matrix: acp-otel against agent-client-protocol releases and Python versions.

    nox -s matrix      # the whole test suite, every (Python, SDK) pair below
    nox -s sdk_suite   # the SDK's own test suite, plain and traced, per SDK release
    nox -s prerelease_zero_code  # opentelemetry-instrument traces the NEXT pre-release under packaging 25
    nox -s floors      # the whole suite on the oldest versions pyproject.toml allows (OpenTelemetry, wrapt)
    nox -s random_order  # the whole suite once in a shuffled order (pytest-randomly, fixed seed)
    nox -s mutation    # mutation testing of the engine and the proxy's process and telemetry (mutmut; slow,
                       # not in the default sessions nor in .ci/run: before a release, when those modules change)
    nox                # all of the above (what scripts/matrix.sh runs)

One pair: ``nox -s "matrix(python='3.12', sdk='1.0.0rc3')"``; list them with ``nox -l``.
Positional arguments after ``--`` go to pytest (e.g. ``-- tests/test_core.py``). Tests that cannot hold on a
release skip themselves with the reason (``tests/support/sdk_versions.py``), so every cell runs every file, but
for the process-lifecycle and proxy-only files (``LIFECYCLE_FILES``, ``PROXY_FILES``: in ``LIFECYCLE_CELLS`` and
the README cell only) and the agent-telemetry files (``AGENT_TELEMETRY_FILES``: the README cell only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["matrix", "sdk_suite", "prerelease_zero_code", "floors", "random_order"]
nox.options.error_on_missing_interpreters = True

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
LATEST = "0.12.1"  # latest stable release: 3.10 (floors), 3.11 (the README cell), 3.13 (random_order)
NEXT = "1.0.0rc3"  # next major's release candidate
NEXT_PYTHONS = ["3.10", "3.12", "3.13"]
# Each Python runs the whole suite at least twice: 3.10 with LATEST (floors), NEXT and 0.8.1; 3.11 with LATEST (the
# README cell) and 0.9.0; 3.12 with NEXT, and the SDK's own suites on every release (sdk_suite); 3.13 with LATEST
# (random_order), NEXT and 0.11.1. Adding LATEST on 3.12 and NEXT on 3.11 would cost CI about 8 minutes.
OLDER = {"0.8.1": "3.10", "0.9.0": "3.11", "0.11.1": "3.13"}  # each older release once
SDK_SUITE = ["0.8.1", "0.9.0", "0.11.1", LATEST, NEXT]
SDK_SUITE_PYTHON = "3.12"

# LATEST runs the whole suite outside the matrix: on Python 3.11 as the README's test command (scripts/test.sh),
# which CI runs last, and in two sessions of their own, `floors` (the oldest OpenTelemetry and wrapt the package
# allows) and `random_order` (shuffled, fixed seed).
FLOORS_CELL = ("3.10", LATEST)
RANDOM_ORDER_CELL = ("3.13", LATEST)
# The proxy's and the editor's process lifecycle (real shutdown sequences, seconds each: over a minute a run)
# hardly depends on the SDK release: these files run in the README cell (scripts/test.sh), on the oldest
# release and on the next major, not in every cell, to keep CI well inside its time (floors and random_order
# run the whole suite, these files included).
LIFECYCLE_FILES = ("tests/test_proxy_shutdown.py", "tests/test_telemetry_lifecycle.py")
# The proxy's handling of the agent's own telemetry (--agent-telemetry: real proxy and agent processes exporting
# through the proxy's receiver, minutes a run) does not depend on the SDK release at all (the SDK is only the tests'
# editor): these files run in the README cell, floors and random_order only.
AGENT_TELEMETRY_FILES = (
    "tests/test_agent_telemetry_proxy.py",
    "tests/test_agent_privacy_promises.py",
    "tests/test_agent_joining_promises.py",
    "tests/test_agent_refused_exports.py",
    "tests/test_forwarder_stall.py",
)
# The proxy's own files whose SDK use, if any, is a plain peer process (no acp-otel adapter in it): raw bytes, the
# relay, the proxy's options and telemetry set-up, the agent telemetry's pure parts and senders. Where the lifecycle
# files run, and not in the other cells.
PROXY_FILES = (
    "tests/test_proxy_bytes.py",
    "tests/test_proxy_framing.py",
    "tests/test_proxy_lifecycle.py",
    "tests/test_proxy_options.py",
    "tests/test_proxy_splice.py",
    "tests/test_proxy_telemetry.py",
    "tests/test_forwarder_senders.py",
    "tests/test_agent_telemetry_units.py",
    "tests/test_receiver.py",
)
LIFECYCLE_CELLS = {("3.10", "0.8.1"), ("3.13", NEXT)}

# -- CI lanes. `.ci/run` runs the default sessions in two lanes: the sessions tagged "ci-1" (`nox -t ci-1`), then
# every other default session, side by side in two nox processes (CI_LANES=1: one after the other; one suite keeps
# about three quarters of a core busy, so two fill the machine's two cores). ci-1 holds every session that runs the
# process-lifecycle files, so that side by side their shutdown sequences never run twice at once (and only one at a
# time holds the default OTLP port); the other lane has the remaining cells, the SDK's suites and the pre-release
# check, then phoenix, backends, real_agents, rust_sdk, the wheel check and mypy (CONTRIBUTING.md, "CI").
CI_LANE_1 = ["ci-1"]
CI_LANE_1_CELLS = LIFECYCLE_CELLS


def _cell(py: str, sdk: str) -> nox.param:
    tags = CI_LANE_1 if (py, sdk) in CI_LANE_1_CELLS else []
    return nox.param(py, sdk, id=f"python='{py}', sdk='{sdk}'", tags=tags)


MATRIX = [*(_cell(py, NEXT) for py in NEXT_PYTHONS), *(_cell(py, sdk) for sdk, py in OLDER.items())]


def _use_pyenv_interpreters() -> None:
    """Make ``python3.10`` ... ``python3.13`` resolvable when pyenv has them but only one is selected."""
    if os.environ.get("PYENV_VERSION") or not shutil.which("pyenv"):
        return
    missing = [py for py in PYTHONS if not _runs(f"python{py}")]
    if not missing:
        return
    try:
        installed = subprocess.run(
            ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return
    chosen = []
    for py in PYTHONS:
        candidates = sorted(
            (v for v in installed if v.startswith(py + ".") and v.replace(".", "").isdigit()),
            key=lambda v: tuple(int(x) for x in v.split(".")),
        )
        if candidates:
            chosen.append(candidates[-1])
    if chosen:
        os.environ["PYENV_VERSION"] = ":".join(chosen)


def _runs(exe: str) -> bool:
    path = shutil.which(exe)
    if path is None:
        return False
    return subprocess.run([path, "-c", ""], capture_output=True, check=False).returncode == 0


_use_pyenv_interpreters()


# The remote transport tests (tests/test_remote_*.py) run where the SDK has acp.http (NEXT): its "http" extra,
# an ASGI server and the HTTP instrumentations, resolved together with the test extra in one install.
REMOTE_TEST_DEPS = ["uvicorn", "opentelemetry-instrumentation-starlette", "opentelemetry-instrumentation-httpx"]


# -- How sessions install. The environments are the standard library's venv (with pip: scripts/sdk_suite.py and
# the SDK's sdist download use it); uv installs into them when it is beside nox (scripts/matrix.sh puts it there) or
# on PATH: seconds where pip takes twenty or more, and with one cache for every session. Without uv, pip installs.
UV = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
# ACP_OTEL_WHEEL names a wheel of this repository, built once (`.ci/run` builds it, from the sdist): every session
# installs it instead of building the source tree again, and sessions running side by side never build in the
# same tree at once. Unset, sessions install the source tree (".").
WHEEL = os.environ.get("ACP_OTEL_WHEEL")


def _package(extras: str = "") -> str:
    """acp-otel with ``extras`` (e.g. "[test]"): the prebuilt wheel when there is one, else the source tree."""
    if WHEEL:
        return f"acp-otel{extras} @ {Path(WHEEL).resolve().as_uri()}"
    return f".{extras}"


def _pip_install(session: nox.Session, *args: str) -> None:
    """``pip install args`` into the session's environment, through uv when there is one."""
    if UV is None:
        session.install(*args)
        return
    python = os.path.join(session.bin, "python")
    # acp-otel itself is built afresh every time (never a wheel uv cached from older sources).
    fresh = ("--reinstall-package", "acp-otel") if any(a.startswith((".", "acp-otel")) for a in args) else ()
    session.run(UV, "pip", "install", "--quiet", *fresh, "--python", python, *args)


def _uv(session: nox.Session) -> str:
    """uv for the sessions that cannot do without it (phoenix, real_agents): nox's, else installed from PyPI."""
    if UV is not None:
        return UV
    session.install("uv")
    return "uv"


def _install(session: nox.Session, sdk: str, extras: str = "", remote: bool = False) -> None:
    # An exact pin such as ==1.0.0rc3 selects a pre-release without --pre.
    sdk_extra = "[http]" if remote else ""
    _pip_install(
        session, _package(extras), f"agent-client-protocol{sdk_extra}=={sdk}", *(REMOTE_TEST_DEPS if remote else ())
    )
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m, sys; v = m.version('agent-client-protocol'); "
        f"sys.exit(0 if v == {sdk!r} else f'installed agent-client-protocol {{v}}, wanted {sdk}')",
        silent=True,
    )


@nox.session
@nox.parametrize(("python", "sdk"), MATRIX)
def matrix(session: nox.Session, sdk: str) -> None:
    """The whole test suite against one SDK release on one Python (the process-lifecycle and proxy-only files in
    some cells, the agent-telemetry files in none: see LIFECYCLE_FILES, PROXY_FILES, AGENT_TELEMETRY_FILES)."""
    _install(session, sdk, "[test]", remote=sdk == NEXT)
    args = list(session.posargs)
    if not args:
        left_out = AGENT_TELEMETRY_FILES
        if (session.python, sdk) not in LIFECYCLE_CELLS:
            left_out += LIFECYCLE_FILES + PROXY_FILES
        args = [f"--ignore={path}" for path in left_out]
    # The pytest script (not python -m pytest) keeps the repo root off sys.path: the installed
    # package is what gets tested. -rs lists every skip with its reason.
    session.run("pytest", "-q", "-rs", "-p", "no:cacheprovider", *args)


@nox.session(python=SDK_SUITE_PYTHON)
@nox.parametrize("sdk", SDK_SUITE)
def sdk_suite(session: nox.Session, sdk: str) -> None:
    """The SDK's own tests from its sdist, run plain and with tracing on (see scripts/sdk_suite.py)."""
    _install(session, sdk)
    # Its summary: summary-SDK.json in the sdist cache. ACP_OTEL_UV: the SDK's test tools are installed with uv too.
    session.run("python", "scripts/sdk_suite.py", sdk, env={"ACP_OTEL_UV": UV or ""})


@nox.session(python=SDK_SUITE_PYTHON)
def prerelease_zero_code(session: nox.Session) -> None:
    """``opentelemetry-instrument`` wraps the SDK on the NEXT pre-release with ``packaging`` 25.

    The launcher checks the ``instruments`` extra with packaging's default pre-release rules, which before
    packaging 26 let a pre-release match only a range that names one (see acp_otel/package.py).
    """
    _install(session, NEXT, "[test]")
    _pip_install(session, "packaging==25.0")
    session.run(
        "python",
        "-c",
        "import packaging, sys; v = packaging.__version__; sys.exit(0 if v == '25.0' else f'packaging {v}')",
        silent=True,
    )
    # The whole file: the opentelemetry-instrument entry point, and instrument() called in code.
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/test_instrumentor.py")


# -- A real backend: Arize Phoenix (tests/backends/). Not a default session: `.ci/run` runs it on its own.
PHOENIX = "20.26.1"
PHOENIX_PYTHON = "3.12"


@nox.session(python=PHOENIX_PYTHON)
def phoenix(session: nox.Session) -> None:
    """Traced turns into a real Phoenix server on loopback, read back through its REST and GraphQL API: the example
    agent's, and the real agents' own telemetry through ``acp-otel proxy --agent-telemetry``.

    Phoenix gets a virtual environment of its own (inside this session's), so its pins never change the
    packages acp-otel is tested with; ``tests/backends/check_phoenix.py`` starts it, runs the turns and stops it.
    Both installs go through uv (nox's, or from PyPI into this session): pip takes minutes to resolve Phoenix's
    dependencies, uv seconds.
    """
    uv = _uv(session)
    test_python = os.path.join(session.bin, "python")
    server_env = os.path.join(session.virtualenv.location, "phoenix-server")
    server_python = os.path.join(server_env, "bin", "python")
    uv_install = (uv, "pip", "install", "--quiet", "--python")
    session.run(*uv_install, test_python, _package("[test]"), f"agent-client-protocol=={LATEST}")
    if not os.path.exists(server_python):
        session.run(uv, "venv", "--quiet", "--python", test_python, server_env)
    session.run(*uv_install, server_python, f"arize-phoenix=={PHOENIX}")
    # The real agents whose own telemetry the proxy forwards into Phoenix (Gemini CLI, Qwen Code, OpenCode): the
    # npm packages of tests/real_agents, installed as the real_agents session installs them (seconds when present).
    _npm_agents(session)
    session.run(
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        "tests/backends/check_phoenix.py",
        *session.posargs,
        env={"ACP_OTEL_PHOENIX_PYTHON": server_python},
    )


# -- The stack most users run (tests/backends/check_collector_stack.py): an OpenTelemetry Collector forwarding to
# Jaeger v2 and Prometheus 3, real binaries built from the Go module proxy by scripts/build_backends.sh (cached
# outside the clone, keyed by version). Not a default session: `.ci/run` runs it on its own.
BACKENDS_PYTHON = "3.12"


@nox.session(python=BACKENDS_PYTHON)
def backends(session: nox.Session) -> None:
    """Traced turns through the Collector into Jaeger and Prometheus, read back through their HTTP APIs.

    Without a Go toolchain the session skips (a user's machine); under ``CI=true`` it fails instead.
    """
    if shutil.which("go") is None and os.environ.get("CI") != "true":
        session.skip("no Go toolchain on PATH: Jaeger, the Collector and Prometheus are built from Go modules")
    _pip_install(session, _package("[test]"), f"agent-client-protocol=={LATEST}")
    # Built (or found in the cache) before the tests, so that the build's time is printed on its own.
    session.run("bash", "scripts/build_backends.sh", external=True)
    # Qwen Code, for the --agent-telemetry case, installed from the lock file as the real_agents session does.
    root = os.getcwd()
    session.chdir("tests/real_agents")
    session.run("npm", "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error", external=True)
    session.chdir(root)
    session.run(
        "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/backends/check_collector_stack.py", *session.posargs
    )


# Real third-party agents (tests/real_agents): kimi-cli from PyPI beside acp-otel, the npm agents from
# tests/real_agents/package-lock.json. Python 3.13: kimi-cli needs >= 3.12, and 3.12.1 cannot import it.
REAL_AGENTS_PYTHON = "3.13"
KIMI_CLI = "kimi-cli==1.52.0"
# Python agents whose pins conflict with kimi-cli's (typer): each in a virtual environment of its own inside the
# session's, named to the tests by an environment variable. agentao's ACP server needs its "cli" extra.
AGENT_VENVS = {
    "ACP_OTEL_FAST_AGENT_VENV": ("fast-agent", "fast-agent-mcp==0.10.48"),
    "ACP_OTEL_AGENTAO_VENV": ("agentao", "agentao[cli]==0.5.17"),
}


def _npm_agents(session: nox.Session) -> None:
    """The npm agents of tests/real_agents/package-lock.json, installed in tests/real_agents/node_modules."""
    root = os.getcwd()
    session.chdir("tests/real_agents")
    # Not `npm ci`: Qwen Code's optional clipboard dependency names per-platform packages that were never
    # published, which npm leaves out of the lock file and `npm ci` then reports as missing. `npm install
    # --no-save` installs the lock file's versions without rewriting it; `npm ls` fails on any other version.
    session.run("npm", "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error", external=True)
    session.run("npm", "ls", "--depth=0", external=True, silent=True)
    session.chdir(root)


@nox.session(python=REAL_AGENTS_PYTHON)
def real_agents(session: nox.Session) -> None:
    """Eleven real agents behind ``acp-otel proxy``, offline (a scripted model); see docs/agents.md."""
    # uv (nox's, or from PyPI) resolves kimi-cli's ~150 dependencies in seconds where pip takes minutes.
    uv = _uv(session)
    python = os.path.join(session.bin, "python")
    session.run(uv, "pip", "install", "--quiet", "--python", python, _package("[test]"), KIMI_CLI, "pytest-xdist")
    agent_env = {"ACP_OTEL_REAL_AGENTS": "1"}
    for variable, (name, requirement) in AGENT_VENVS.items():
        venv = os.path.join(session.virtualenv.location, f"agent-{name}")
        if not os.path.exists(os.path.join(venv, "bin", "python")):
            session.run(uv, "venv", "--quiet", "--python", python, venv)
        session.run(uv, "pip", "install", "--quiet", "--python", os.path.join(venv, "bin", "python"), requirement)
        agent_env[variable] = venv
    _npm_agents(session)
    session.run(
        "pytest",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "-n",
        "3",
        "tests/real_agents",
        *session.posargs,
        env=agent_env,
    )


# The Rust SDK (crates.io's agent-client-protocol, tests/rust_peers/): its agent and client, built with cargo from
# the lock file into a target directory outside the clone (scripts/build_rust_peers.sh), through the proxy.
RUST_SDK_PYTHON = "3.12"


@nox.session(python=RUST_SDK_PYTHON)  # not a default session: `.ci/run` runs it in lane 2
def rust_sdk(session: nox.Session) -> None:
    """The Rust SDK's agent and client on both sides of ``acp-otel proxy``; see docs/agents.md."""
    _pip_install(session, _package("[test]"), f"agent-client-protocol=={LATEST}")
    session.run("bash", "scripts/build_rust_peers.sh", external=True)
    session.run(
        "pytest",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "tests/rust_peers",
        *session.posargs,
        env={"ACP_OTEL_RUST_SDK": "1"},
    )


# ---------------------------------------------------------------------------------------------- floors, order
# The oldest releases pyproject.toml's dependencies allow, on the oldest Python: each ">=" there is tested here
# (the matrix installs the newest). The test extra's own OpenTelemetry packages (opentelemetry-test-utils) pin
# exact API/SDK versions, so they are pinned with them. Keep in step with pyproject.toml.
FLOORS = {
    "opentelemetry-api": "1.27.0",
    "opentelemetry-sdk": "1.27.0",
    "opentelemetry-exporter-otlp": "1.27.0",
    "opentelemetry-instrumentation": "0.48b0",
    "opentelemetry-distro": "0.48b0",
    "opentelemetry-test-utils": "0.48b0",
    "wrapt": "1.14.1",
    "agent-client-protocol": FLOORS_CELL[1],
}
# A fixed seed, printed by pytest-randomly in the run's header: an order-dependent failure is reproducible with
# "-p randomly -p no:cacheprovider --randomly-seed=<seed>". Change it to try another order.
RANDOM_ORDER_SEED = 20261202


@nox.session(python=FLOORS_CELL[0], tags=CI_LANE_1)
def floors(session: nox.Session) -> None:
    """The whole test suite on the declared minimum versions of OpenTelemetry and wrapt (SDK: the latest)."""
    _pip_install(session, _package("[test]"), *(f"{name}=={version}" for name, version in FLOORS.items()))
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m, sys; wanted = dict(a.split('==') for a in sys.argv[1:]); "
        "wrong = {n: m.version(n) for n, v in wanted.items() if m.version(n) != v}; "
        "sys.exit(f'installed {wrong}, wanted {wanted}' if wrong else 0)",
        *(f"{name}=={version}" for name, version in FLOORS.items()),
        silent=True,
    )
    session.run("pytest", "-q", "-rs", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=RANDOM_ORDER_CELL[0], tags=CI_LANE_1)
def random_order(session: nox.Session) -> None:
    """The whole test suite once in a shuffled order (tests, classes and modules), with a fixed seed."""
    _install(session, RANDOM_ORDER_CELL[1], "[test]")
    _pip_install(session, "pytest-randomly")
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--randomly-seed={RANDOM_ORDER_SEED}",
        *session.posargs,
    )


# ---------------------------------------------------------------------------------------------- mutation
MUTMUT = "mutmut==3.8.1"
MUTATION_PYTHON = "3.11"


@nox.session(python=MUTATION_PYTHON)  # not in nox.options.sessions: never run by default
def mutation(session: nox.Session) -> None:
    """Mutation testing (mutmut; the modules and tests are in pyproject.toml's ``[tool.mutmut]``).

    Arguments after ``--`` select mutants (``nox -s mutation -- "acp_otel._usage*"``); mutmut remembers what it
    has run in ``mutants/`` and goes on from there. The score and the verdicts on surviving mutants are kept
    in CONTRIBUTING.md ("Mutation testing").
    """
    session.install(".[test]", f"agent-client-protocol=={LATEST}", MUTMUT)
    session.run("mutmut", "run", *session.posargs)
    session.run("mutmut", "results")
