"""Run the ACP Python SDK's own test suite twice, plain and with acp-otel tracing on, and compare.

Usage (inside a venv that already has acp-otel and ``agent-client-protocol==VERSION`` installed; the
``sdk_suite`` nox session does that)::

    python scripts/sdk_suite.py VERSION [--json OUT]

Steps: download the SDK's sdist (``pip download --no-binary :all: --no-deps``) into a cache directory,
unpack it, install the test requirements its pyproject declares (the ``dev`` dependency group minus
lint and docs tools), then run its ``tests/`` from the unpacked tree, which imports the *installed*
``acp`` (the sdist uses a src layout, so ``src/`` is not importable from there; this is checked). The
second run loads ``tests/support/sdk_suite_plugin.py`` (``-p sdk_suite_plugin``), which instruments before any
test and fails the run if no span was produced.

Exit status is 0 when both runs completed (pytest exit status 0 or 1), the plain run passed some tests,
the traced run produced spans, and every test that passes plain also passes traced (after deselecting the
tests in ``DESELECT_TRACED``, which assert wire payloads that our ``_meta`` keys necessarily change): a
test that passed plain and is missing from the traced run counts as failed. A test that fails only when
traced is re-run once, traced, to tell a flaky test from a real regression.

The summary goes to ``summary-VERSION.json`` in the sdist cache folder (``tests/support/sdk_sdist.py``) unless
``--json`` names another file. Needs Python 3.11+ (``tomllib``); the ``sdk_suite`` nox session uses 3.12.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

import sdk_sdist  # noqa: E402 - tests/support holds the one sdist fetcher (shared with tests/test_e2e.py)

# The plugin, and the module it imports, are copied next to each other for the traced run.
SUPPORT = ROOT / "tests" / "support"
PLUGIN_FILES = [SUPPORT / "sdk_suite_plugin.py", SUPPORT / "span_file_exporter.py"]

# Dev-group entries that are lint, type-check, packaging or docs tools: never needed to run tests.
NOT_FOR_TESTS = {"tox-uv", "deptry", "ty", "ruff", "mkdocs", "mkdocs-material", "mkdocstrings", "prek", "pre-commit"}

# Tests deselected in the traced run only: {version prefix: [(node id, reason)]}. Each must assert an
# exact wire payload that the three W3C keys we add to params._meta necessarily change.
_SSE_REOPEN = "tests/http/test_asgi.py::test_sse_disconnect_releases_reader_before_reopening"
_SSE_REOPEN_WHY = (
    "asserts the exact params of an ext_notification read back from the SSE stream "
    "(== {'message': 'after disconnect'}); tracing adds _meta.traceparent to them"
)
DESELECT_TRACED: dict[str, list[tuple[str, str]]] = {
    "1.0.0": [(f"{_SSE_REOPEN}[/acp]", _SSE_REOPEN_WHY), (f"{_SSE_REOPEN}[/rpc]", _SSE_REOPEN_WHY)],
}


def log(message: str) -> None:
    print(f"[sdk_suite] {message}", flush=True)


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=False, text=True, **kwargs)  # type: ignore[call-overload]


def fetch_sdist(version: str) -> Path:
    """The unpacked sdist of ``agent-client-protocol==version`` (downloaded once into the cache)."""
    try:
        unpacked = sdk_sdist.fetch_sdist(version)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        sys.exit(str(exc))
    if not (unpacked / "tests").is_dir():
        sys.exit(f"the sdist of agent-client-protocol=={version} has no tests/ folder: {unpacked}")
    return unpacked


def test_requirements(sdist: Path) -> list[str]:
    """The SDK's test requirements: its ``dev`` dependency group without lint and docs tools."""
    data = tomllib.loads((sdist / "pyproject.toml").read_text(encoding="utf-8"))
    group = data.get("dependency-groups", {}).get("dev", [])
    reqs = []
    for entry in group:
        if not isinstance(entry, str):  # {include-group = ...}
            continue
        name = re.split(r"[\s\[<>=!~;]", entry, maxsplit=1)[0].lower()
        if name not in NOT_FOR_TESTS:
            reqs.append(entry)
    if not any(r.lower().startswith("pytest") for r in reqs):
        sys.exit(f"no pytest in the dev dependency group of {sdist / 'pyproject.toml'}: {group}")
    return reqs


def install_requirements(version: str, reqs: list[str]) -> None:
    # Keep the SDK exactly at the version under test while its test tools are installed. ACP_OTEL_UV (set by the
    # nox session when nox has uv) installs with uv, in seconds; otherwise pip.
    uv = os.environ.get("ACP_OTEL_UV")
    installer = [uv, "pip", "install", "--python", sys.executable] if uv else [sys.executable, "-m", "pip", "install"]
    proc = run([*installer, "-q", *reqs, "pytest-timeout", f"agent-client-protocol=={version}"])
    if proc.returncode != 0:
        sys.exit("could not install the SDK's test requirements")


def check_imports_installed_sdk(sdist: Path, version: str) -> str:
    code = "import acp, importlib.metadata as m; print(acp.__file__); print(m.version('agent-client-protocol'))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=sdist, capture_output=True, text=True, check=True)
    acp_file, installed = proc.stdout.split()
    if Path(acp_file).resolve().is_relative_to(sdist.resolve()) or installed != version:
        sys.exit(f"tests would not run against the installed SDK {version}: acp={acp_file}, version={installed}")
    return acp_file


def parse_junit(path: Path) -> dict[str, str]:
    """``{test id: passed | failed | error | skipped}`` from a JUnit XML report."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                break
        outcomes[test_id] = outcome
    return outcomes


def counts(outcomes: dict[str, str]) -> dict[str, int]:
    result = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for outcome in outcomes.values():
        result[outcome] += 1
    return result


def pytest_run(
    sdist: Path, junit: Path, traced: bool, extra: list[str], report: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if traced:
        plugin_dir = junit.parent / "plugin"
        plugin_dir.mkdir(exist_ok=True)
        for path in PLUGIN_FILES:
            shutil.copy(path, plugin_dir / path.name)
        env["PYTHONPATH"] = str(plugin_dir)
        if report is not None:
            env["ACP_OTEL_SUITE_REPORT"] = str(report)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--timeout",
        "300",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
    ]
    if traced:
        cmd += ["-p", "sdk_suite_plugin"]
    return run([*cmd, *extra], cwd=sdist, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="agent-client-protocol release whose sdist tests to run")
    parser.add_argument("--json", type=Path, help="write the summary here as JSON (default: in the sdist cache)")
    parser.add_argument("--skip-install", action="store_true", help="the test requirements are installed")
    args = parser.parse_args()
    version: str = args.version

    sdist = fetch_sdist(version)
    if not args.skip_install:
        install_requirements(version, test_requirements(sdist))
    acp_file = check_imports_installed_sdk(sdist, version)
    log(f"SDK {version} tests from {sdist}, importing {acp_file}")

    deselected = [
        entry for prefix, entries in DESELECT_TRACED.items() if version.startswith(prefix) for entry in entries
    ]
    deselect_args = [arg for node, _ in deselected for arg in ("--deselect", node)]

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="acp-sdk-suite-") as tmp:
        work = Path(tmp)
        plain_proc = pytest_run(sdist, work / "plain.xml", traced=False, extra=[])
        plain = parse_junit(work / "plain.xml") if (work / "plain.xml").exists() else {}
        traced_proc = pytest_run(
            sdist, work / "traced.xml", traced=True, extra=deselect_args, report=work / "spans.json"
        )
        traced = parse_junit(work / "traced.xml") if (work / "traced.xml").exists() else {}
        spans = json.loads((work / "spans.json").read_text()) if (work / "spans.json").exists() else {}

        # pytest exit status 0: all passed, 1: some failed; anything else: the run itself did not complete.
        for name, proc in (("plain", plain_proc), ("traced", traced_proc)):
            if proc.returncode not in (0, 1):
                problems.append(f"the {name} run did not complete (pytest exit status {proc.returncode})")
        if counts(plain)["passed"] == 0:
            problems.append("the plain run passed no test")
        if spans.get("spans", 0) == 0:
            problems.append("the traced run produced no span")

        bad = ("failed", "error")
        deselected_nodes = {node for node, _ in deselected}
        missing = sorted(
            t
            for t, o in plain.items()
            if o == "passed" and t not in traced and _node_id(sdist, t) not in deselected_nodes
        )
        only_traced = sorted(t for t, o in traced.items() if o in bad and plain.get(t) not in bad)
        flaky: list[str] = []
        if only_traced:
            # Re-run each once, traced: a pass there means the test is flaky, not broken by tracing.
            log(f"re-running {len(only_traced)} test(s) that failed only when traced")
            rerun = [_node_id(sdist, t) for t in only_traced]
            pytest_run(sdist, work / "rerun.xml", traced=True, extra=rerun)
            again = parse_junit(work / "rerun.xml")
            flaky = [t for t in only_traced if again.get(t) == "passed"]
            only_traced = [t for t in only_traced if t not in flaky]

    summary = {
        "sdk": version,
        "python": sys.version.split()[0],
        "plain": counts(plain),
        "traced": counts(traced),
        "deselected_traced": [{"test": node, "reason": reason} for node, reason in deselected],
        "failed_only_traced": only_traced,
        "missing_traced": missing,
        "flaky_only_traced": flaky,
        "failed_plain": sorted(t for t, o in plain.items() if o in bad),
        "spans": spans,
        "plain_exit": plain_proc.returncode,
        "traced_exit": traced_proc.returncode,
        "problems": problems,
    }
    log(json.dumps(summary, indent=2))
    out = args.json or sdk_sdist.CACHE / f"summary-{version}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    ok = not only_traced and not missing and not problems
    log(("OK" if ok else "FAILED") + f": SDK {version} plain {summary['plain']} traced {summary['traced']}")
    return 0 if ok else 1


def _node_id(sdist: Path, test_id: str) -> str:
    """Turn a JUnit ``classname::name`` back into a pytest node id (``tests/x.py::Class::name``)."""
    classname, name = test_id.split("::", 1)
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        candidate = Path(*parts[:i]).with_suffix(".py")
        if (sdist / candidate).is_file():
            return "::".join([candidate.as_posix(), *parts[i:], name])
    return test_id


if __name__ == "__main__":
    sys.exit(main())
