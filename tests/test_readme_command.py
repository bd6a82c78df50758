"""The README's test command (``scripts/test.sh``) runs what CI runs of the tests: the files that need the SDK's
next major run there too, on that release with what the matrix installs for them, and every skip says why. And
the documented ``pip install`` commands install what exists: acp-otel from a checkout (it is not on PyPI), the
SDK's HTTP transport from the release that has it."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_SH = ROOT / "scripts" / "test.sh"


def shell_assignments(path: Path) -> dict[str, list[str]]:
    """``NAME="value"`` and ``NAME=(a b ...)`` lines of a shell script, as word lists (``$NAME`` expanded from
    earlier assignments)."""
    found: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Z_]+)=(\(.*\)|\S+)$", line)
        if match:
            value = match.group(2)
            for name, words in found.items():
                value = value.replace(f"${name}", " ".join(words))
            found[match.group(1)] = shlex.split(value[1:-1] if value.startswith("(") else value)
    return found


def noxfile_constants() -> dict[str, object]:
    """The module-level constants of noxfile.py (read, not imported: nox is not a test dependency)."""
    constants: dict[str, object] = {}
    for node in ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return constants


def needs_the_next_major(path: Path) -> bool:
    """A test file that skips whole on the SDK's stable release: ACP v2 or the remote transports."""
    text = path.read_text(encoding="utf-8")
    module_skip = r"^pytestmark = \[?\s*REMOTE_TRANSPORTS\b|^\w+ = pytest\.importorskip\(\s*\"acp\.experimental\.v2\""
    return re.search(module_skip, text, re.MULTILINE) is not None


def test_the_next_major_pass_runs_every_file_that_needs_it() -> None:
    assigned = shell_assignments(TEST_SH)
    wanted = {f"tests/{p.name}" for p in sorted((ROOT / "tests").glob("test_*.py")) if needs_the_next_major(p)}
    assert {"tests/test_agent_v2.py", "tests/test_remote_transports.py"} <= wanted  # the detection finds them
    assert set(assigned["NEXT_TESTS"]) == wanted


def test_the_next_major_pass_installs_what_the_matrix_installs() -> None:
    assigned = shell_assignments(TEST_SH)
    nox = noxfile_constants()
    assert assigned["NEXT_SDK"] == [nox["NEXT"]]
    # the matrix's cells of that release: the SDK's "http" extra plus REMOTE_TEST_DEPS (noxfile._install)
    remote_deps = nox["REMOTE_TEST_DEPS"]
    assert isinstance(remote_deps, list)
    assert sorted(assigned["NEXT_DEPS"]) == sorted([f"agent-client-protocol[http]=={nox['NEXT']}", *remote_deps])


def test_every_pytest_run_lists_its_skips() -> None:
    runs = [line for line in TEST_SH.read_text(encoding="utf-8").splitlines() if "-m pytest" in line]
    assert len(runs) == 2  # the next major's files, then the whole suite
    assert all(" -rs " in f" {line} " for line in runs), runs


def test_the_readme_shows_the_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.splitlines()] == [
        ["bash", "scripts/demo.sh"],
        ["bash", "scripts/test.sh"],
    ]


DOCS = ["README.md", "CONTRIBUTING.md", "examples/README.md", "collector-config/README.md", "docs"]


def pip_installs(markdown: str) -> list[list[str]]:
    """The arguments of each ``pip install`` / ``pipx install`` in the shell blocks and inline code of a text."""
    code = re.findall(r"```(?:sh|bash)\n(.*?)```", markdown, re.DOTALL) + re.findall(r"`([^`\n]+)`", markdown)
    found = []
    for text in code:
        for match in re.finditer(r"\bpipx? install ([^\n#&;|]*)", text):
            found.append([w for w in shlex.split(match.group(1)) if not w.startswith("-")])
    return found


def install_problems(args: list[str]) -> list[str]:
    problems = []
    for arg in args:
        name = re.split(r"[\[=<>!~ ]", arg, maxsplit=1)[0]
        if name == "acp-otel":  # by name, not a path to a checkout or a wheel
            problems.append(f"{arg}: acp-otel is not on PyPI, install it from a checkout or a wheel")
        if arg.startswith("agent-client-protocol[http]") and not re.search(r"(==|>=)\s*1\.0\.0rc3", arg):
            problems.append(f"{arg}: without naming the pre-release, pip picks a stable release without acp.http")
    return problems


def test_documented_installs_resolve() -> None:
    files = [p for d in DOCS for p in ((ROOT / d).glob("*.md") if (ROOT / d).is_dir() else [ROOT / d])]
    installs = [args for path in files for args in pip_installs(path.read_text(encoding="utf-8"))]
    assert len(installs) >= 5  # the README's, the remote agents' recipe, ...
    assert [p for args in installs for p in install_problems(args)] == []
    # and the check can fail
    assert len(install_problems(["acp-otel", "agent-client-protocol[http]", "uvicorn"])) == 2
    assert install_problems(["./acp-otel", "agent-client-protocol[http]==1.0.0rc3"]) == []


def test_the_files_some_matrix_cells_leave_out_exist() -> None:
    # pytest's --ignore of a path that does not exist is silent: a renamed file would run in every cell unnoticed.
    nox = noxfile_constants()
    for name in ("LIFECYCLE_FILES", "AGENT_TELEMETRY_FILES", "PROXY_FILES"):
        paths = nox[name]
        assert isinstance(paths, tuple) and paths, name
        missing = [p for p in paths if not (ROOT / p).is_file()]
        assert not missing, (name, missing)
