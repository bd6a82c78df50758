"""The Markdown files' relative links and anchors resolve (scripts/check_links.py), and the checker can fail."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_links.py"


def run_checker(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_links", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_links"] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["check_links"]
    return module


def test_repository_links_resolve() -> None:
    result = run_checker(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "0 broken" in result.stderr
    checked = int(result.stderr.split("check_links: ", 1)[1].split(" ", 1)[0])
    assert checked > 20  # the README and docs/ link to each other: the files were found and read


def test_checker_reports_broken_files_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        '# Guide\n\n## The proxy: `acp-otel proxy`\n\n## Repeated\n\n## Repeated\n\n<a id="custom"></a>\n',
        encoding="utf-8",
    )
    (tmp_path / "script.py").write_text("print()\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "\n".join(
            [
                "# Top",
                "[ok](docs/guide.md#the-proxy-acp-otel-proxy) [ok](docs/guide.md#repeated-1)",
                "[ok](docs/guide.md#custom) [ok](docs/guide.md#repeated)",
                "[ok](script.py#L1) [ok](docs/) [ok](#top) [ok](/docs/guide.md) [web](https://example.invalid/x)",
                "[missing file](docs/nothing.md)",
                "[missing anchor](docs/guide.md#repeated-2)",
                "[missing local anchor](#bottom)",
                "`[in inline code](nowhere.md)`",
                "```markdown",
                "[in a code block](nowhere.md)",
                "```",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    result = run_checker(tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "README.md:5: 'docs/nothing.md': no such file or directory",
        "README.md:6: 'docs/guide.md#repeated-2': no heading or anchor #repeated-2 in docs/guide.md",
        "README.md:7: '#bottom': no heading or anchor #bottom in this file",
    ]
    assert "1 external links not checked" in result.stderr


def test_fixed_links_pass(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Top\n\n## Next part\n\n[here](#next-part)\n", encoding="utf-8")
    assert run_checker(tmp_path).returncode == 0
    (tmp_path / "README.md").write_text("# Top\n\n## Next part\n\n[here](#next-parts)\n", encoding="utf-8")
    assert run_checker(tmp_path).returncode == 1


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Proxy: any agent, any editor", "proxy-any-agent-any-editor"),
        ("The demo: `acp-otel demo`", "the-demo-acp-otel-demo"),
        ("Peers that reject `_meta.traceparent`", "peers-that-reject-_metatraceparent"),
        ("Handlers, `_meta` and propagation", "handlers-_meta-and-propagation"),
        ("The proxy's flags", "the-proxys-flags"),
        ("Jaeger, Tempo and Grafana", "jaeger-tempo-and-grafana"),
        ("See [the docs](docs/README.md) now", "see-the-docs-now"),
        ("Python 3.10 – 3.13", "python-310--313"),
    ],
)
def test_github_slugs(checker: ModuleType, heading: str, slug: str) -> None:
    assert checker.github_slug(heading) == slug
