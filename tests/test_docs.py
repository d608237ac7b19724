"""The documentation is checked like code.

- Every relative link in README.md, docs/**/*.md and packages/*/README.md reaches a file
  or folder of the repository, and a `#anchor` reaches a heading of the Markdown file it
  names (GitHub's heading ids). External links (http, https, mailto) are not fetched.
- No document points outside the repository: a link (or a path in inline code, such as
  `../x.md`) that climbs above the repository's root, or resolves outside it, fails
  even when the file exists on this machine, because a user's clone has nothing there.
- The README's smallest training loop (the first ```python block under the heading
  "The smallest training loop") runs in a fresh process, on the tiny data it makes
  itself, within a minute.
- The README's quickstart commands (the ones CI runs) stay within its first 40 lines.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LOOP_HEADING = "The smallest training loop"
QUICKSTART_COMMANDS = ("python3 -m nox -s demo", "python3 -m nox -s tests")


def markdown_files() -> list[Path]:
    files = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted((ROOT / "packages").glob("*/README.md"))
    return files


# --- reading Markdown -------------------------------------------------------------------

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target), with an optional "title"; text may hold one level
# of brackets (a link whose text is `a[i]`).
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# Inline code that is a relative path climbing up (`../shared/DESIGN.md`).
_CODE_PATH = re.compile(r"(?:\.\./)+[^\s`]*")


def prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    in_fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if match:
            if in_fence is None:
                in_fence = match.group(1)
            elif match.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is None:
            yield number, line


def links(text: str):
    """(line number, target) of every inline link and image outside code; a link's text
    may run over several lines."""
    lines = text.splitlines()
    prose = dict(prose_lines(text))
    kept = [prose.get(number, "") for number in range(1, len(lines) + 1)]
    blanked = [_INLINE_CODE.sub(lambda m: " " * len(m.group()), line) for line in kept]
    joined = "\n".join(blanked)
    for match in _LINK.finditer(joined):
        yield joined.count("\n", 0, match.start()) + 1, match.group(1)


def code_paths(text: str):
    """(line number, path) of every inline code span outside fenced blocks that is a
    relative path starting with `../`."""
    for number, line in prose_lines(text):
        for match in _INLINE_CODE.finditer(line):
            content = match.group()[len(match.group(1)) : -len(match.group(1))].strip()
            if _CODE_PATH.fullmatch(content):
                yield number, content


def outside_repository(folder: Path, target: str) -> str | None:
    """Where ``target`` (relative to ``folder``) goes if that is outside the repository,
    else None: it climbs above the root on the way (``../../main/x`` works only in a
    clone whose folder is named ``main``) or resolves, links followed, outside it. Whether
    the file exists does not matter."""
    root = ROOT.resolve()
    depth = len(folder.resolve().relative_to(root).parts)
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return os.path.relpath(os.path.normpath(folder.resolve() / target), root)
        elif part not in ("", "."):
            depth += 1
    resolved = (folder / target).resolve()
    if resolved != root and root not in resolved.parents:
        return os.path.relpath(resolved, root)
    return None


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: its rendered text lowercased, punctuation dropped
    (letters, digits, '-', '_' and spaces kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))", "", text)  # emphasis marks
    text = text.strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LN" or category == "Mn":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading id of a Markdown file; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    problems = []
    text = path.read_text(encoding="utf-8")
    for number, target in links(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(ROOT)}:{number}: ({target})"
        linked = (path.parent / file_part).resolve() if file_part else path
        if file_part.startswith("/"):
            problems.append(f"{where} is absolute; write it relative to the file")
            continue
        outside = outside_repository(path.parent, file_part) if file_part else None
        if outside is not None:
            problems.append(
                f"{where} leaves the repository (to {outside}, from its root): a clone "
                "has no such file; link a page of the repository instead"
            )
            continue
        if not linked.exists():
            problems.append(f"{where}: no file {os.path.relpath(linked, ROOT)}")
            continue
        if anchor and linked.suffix == ".md":
            if anchor not in anchors(linked):
                known = ", ".join(sorted(anchors(linked)))
                problems.append(
                    f"{where}: no heading #{anchor} in {linked.relative_to(ROOT)} "
                    f"(its headings: {known})"
                )
    for number, target in code_paths(text):
        outside = outside_repository(path.parent, target)
        if outside is not None:
            problems.append(
                f"{path.relative_to(ROOT)}:{number}: (`{target}`) names a path outside the "
                f"repository (to {outside}, from its root): a clone has no such file"
            )
    return problems


# --- the tests --------------------------------------------------------------------------


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_checker_finds_a_broken_link_and_anchor(tmp_path, monkeypatch):
    """The checker itself: a missing file, a missing heading and a heading with code,
    punctuation and a repeat, as GitHub names them."""
    monkeypatch.setitem(broken_links.__globals__, "ROOT", tmp_path)
    (tmp_path / "other.md").write_text(
        "# A whole step under `torch.compile`\n\n## Faults\n\n## Faults\n\n"
        "```python\n# not a heading\n```\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-whole-step-under-torchcompile) [ok](other.md#faults-1)\n"
        "[gone](missing.md) [no anchor](other.md#not-a-heading) [web](https://x.y/z)\n"
        "`[in code](missing.md)`\n"
        "```\n[in a block](missing.md)\n```\n"
        "[text over\ntwo lines](gone/too.md)\n"
    )
    problems = broken_links(page)
    assert len(problems) == 3, problems
    assert "page.md:2: (missing.md): no file missing.md" in problems[0]
    assert "no heading #not-a-heading in other.md" in problems[1]
    assert "page.md:7: (gone/too.md): no file gone/too.md" in problems[2]


def test_the_link_checker_refuses_links_that_leave_the_repository(tmp_path, monkeypatch):
    """A link out of the repository fails even when the file exists on this machine (a
    clone has nothing there), and so does one that climbs out and back in; a path in
    inline code that leaves fails too. Links inside, and `../` paths in code blocks, pass."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    monkeypatch.setitem(broken_links.__globals__, "ROOT", root)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("# Design\n")
    (root / "README.md").write_text("# Project\n")
    page = root / "docs" / "page.md"
    page.write_text(
        "[up](../README.md) [here](page.md)\n"
        "[out](../../shared/DESIGN.md) [gone](../../nowhere.md)\n"
        "[round trip](../../repo/README.md)\n"
        "The map is `../../shared/DESIGN.md`; the index is `../README.md`.\n"
        "```\ncat ../../shared/DESIGN.md\n```\n"
    )
    problems = broken_links(page)
    assert len(problems) == 4, problems
    assert problems[0].startswith("docs/page.md:2: (../../shared/DESIGN.md) leaves the repository")
    assert "(to ../shared/DESIGN.md, from its root)" in problems[0]
    assert problems[1].startswith("docs/page.md:2: (../../nowhere.md) leaves the repository")
    assert problems[2].startswith("docs/page.md:3: (../../repo/README.md) leaves the repository")
    assert problems[3].startswith(
        "docs/page.md:4: (`../../shared/DESIGN.md`) names a path outside the repository"
    )


def readme_block(heading: str, language: str) -> str:
    """The first ```language block after the heading named `heading` in README.md."""
    lines = README.read_text(encoding="utf-8").splitlines()
    starts = [
        i for i, line in enumerate(lines) if re.fullmatch(rf"#+\s+{re.escape(heading)}\s*", line)
    ]
    assert starts, f"README.md has no heading {heading!r}: the test reads the loop under it"
    opening = f"```{language}"
    for i in range(starts[0] + 1, len(lines)):
        if lines[i].startswith("#"):
            break
        if lines[i].strip() == opening:
            end = lines.index("```", i + 1)
            return "\n".join(lines[i + 1 : end]) + "\n"
    raise AssertionError(f"README.md has no {opening} block under {heading!r}")


def test_the_readme_training_loop_runs(tmp_path):
    code = readme_block(LOOP_HEADING, "python")
    script = tmp_path / "smallest_training_loop.py"
    script.write_text(code)
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the README's training loop took over {e.timeout} s:\n{code}")
    if done.returncode != 0:
        pytest.fail(f"the README's training loop failed:\n{done.stderr[-3000:]}")
    loss, cached = done.stdout.split()[-2:]
    assert math.isfinite(float(loss)), done.stdout
    assert cached != "None" and int(cached) >= 1, (
        f"the loop's steady steps were not served from the cache (CachedCompile={cached})"
    )


def test_the_quickstart_commands_are_in_the_readmes_first_40_lines():
    head = README.read_text(encoding="utf-8").splitlines()[:40]
    for command in QUICKSTART_COMMANDS:
        assert any(line.startswith(command) for line in head), (
            f"{command!r} (what CI runs) is not in README.md's first 40 lines"
        )
