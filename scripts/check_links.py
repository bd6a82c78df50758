"""Check the relative links and ``#anchors`` of the repository's Markdown files.

Usage: ``python scripts/check_links.py [ROOT]`` (default: the repository this script is in). Every tracked
or new, not ignored ``*.md`` file (``git ls-files``; every ``*.md`` under ROOT outside hidden and
virtual-environment directories when ROOT is not a git work tree) is read, and each link in it is checked:

* a relative link must name a file or directory that exists (relative to the linking file; a leading ``/``
  means the repository root, as on GitHub);
* an anchor (``#part``) must be a heading of the target Markdown file, with GitHub's slugs, or an explicit
  ``<a id="...">`` / ``<a name="...">`` in it; a bare ``#part`` refers to the linking file itself.

Links in fenced code blocks and inline code are not links. External links (``http:``, ``https:``,
``mailto:`` …) are counted but not checked: the machines this runs on have no network.

Prints one line per problem (``file:line: message``) and exits 1 when there is any, 0 otherwise.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); target may be <...> and may be followed by a title.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)")
_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_HTML_HREF = re.compile(r"<a\s[^>]*\bhref\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SKIPPED_DIRS = {".git", ".venv", ".nox", "node_modules", "build", "dist", "__pycache__"}


@dataclass(frozen=True)
class Link:
    """A link found in a Markdown file."""

    path: Path
    line: int
    target: str


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (without the ``-1``, ``-2`` … of repeats)."""
    text = _INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    kept = []
    for ch in text:
        # GitHub keeps letters, digits, marks, connector punctuation (_), hyphens and spaces.
        category = unicodedata.category(ch)
        if ch in "- " or ch == "_" or category[0] in ("L", "N", "M") or category == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def _code_free_lines(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line number, line, line with inline code blanked)`` for each line outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line, _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
            fence = None


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown text defines: heading slugs (repeats numbered) and explicit HTML anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _number, line, without_code in _code_free_lines(text):
        found.update(_HTML_ANCHOR.findall(without_code))
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[Link]:
    """The links of one Markdown file, outside code."""
    found = []
    for number, _line, without_code in _code_free_lines(path.read_text(encoding="utf-8")):
        targets = [m.group(1) for m in _INLINE_LINK.finditer(without_code)]
        targets += _HTML_HREF.findall(without_code)
        definition = _REFERENCE_DEF.match(without_code)
        if definition:
            targets.append(definition.group(1))
        for target in targets:
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            found.append(Link(path, number, target.strip()))
    return found


def markdown_files(root: Path) -> list[Path]:
    """The tracked ``*.md`` files of ``root`` (all of them outside hidden/venv dirs when it is not a git tree)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout
        if (root / ".git").exists():
            return sorted({root / name for name in listed.split("\0") if name})
    except (OSError, subprocess.CalledProcessError):
        pass
    return sorted(p for p in root.rglob("*.md") if not any(part in _SKIPPED_DIRS for part in p.relative_to(root).parts))


def check(root: Path) -> tuple[list[str], int, int]:
    """``(problems, links checked, external links skipped)`` for the Markdown files under ``root``."""
    root = root.resolve()
    problems: list[str] = []
    anchor_cache: dict[Path, set[str]] = {}
    checked = external = 0

    def anchors_of(path: Path) -> set[str]:
        if path not in anchor_cache:
            anchor_cache[path] = anchors(path.read_text(encoding="utf-8"))
        return anchor_cache[path]

    for source in markdown_files(root):
        if not source.is_file():
            continue  # tracked but deleted in the work tree
        for link in links(source):
            where = f"{source.relative_to(root)}:{link.line}"
            target = link.target
            if not target or _SCHEME.match(target) or target.startswith("//"):
                external += bool(target)
                continue
            checked += 1
            file_part, _, fragment = target.partition("#")
            file_part = unquote(file_part.split("?", 1)[0])
            if not file_part:
                destination = source
            elif file_part.startswith("/"):
                destination = root / file_part.lstrip("/")
            else:
                destination = source.parent / file_part
            if not destination.exists():
                problems.append(f"{where}: {target!r}: no such file or directory")
                continue
            if fragment and destination.is_file() and destination.suffix.lower() == ".md":
                if unquote(fragment).lower() not in anchors_of(destination):
                    problems.append(
                        f"{where}: {target!r}: no heading or anchor #{fragment} in {file_part or 'this file'}"
                    )
    return problems, checked, external


def main(argv: list[str] | None = None) -> int:
    """Check ``argv[0]`` (default: this repository); print the problems; 1 if there were any."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    problems, checked, external = check(root)
    for problem in problems:
        print(problem)
    print(
        f"check_links: {checked} relative links checked, {len(problems)} broken; "
        f"{external} external links not checked (no network)",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
