"""The user's docs speak of the tool and what was measured, never of the team's issues, process or machines' locks;
every Markdown link in the docs points at a file that exists and, with an ``#anchor``, at a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Words that belong to the team's process, not to a user's doc (case-insensitive).
PROCESS_WORDS = {
    "an issue number": r"\bissues?\s*#?\d+",
    "the issue's": r"\bthe issue's\b",
    "lending a machine": r"\blent\b",
    "flock": r"\bflock\b",
    "the heavy-job lock file": r"snapkv-heavy\.lock|heavy-job lock",
    "tune runs as process talk": r"\btune runs?\b",
    "this task": r"\bthis task\b",
}

# docs/decisions/ are design notes: they may speak of process, so only their links are checked (and their issue
# numbers, below).
USER_DOCS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
DECISIONS = sorted((DOCS / "decisions").glob("*.md"))
LINKED_DOCS = [path for path in [ROOT / "CONTRIBUTING.md", *USER_DOCS, *DECISIONS] if path.exists()]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans (a command or a path is not a link or a sentence)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, markup and punctuation other than '-' and '_' dropped, spaces to
    '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file (GitHub numbers repeated headings: -1, -2, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = anchor(match[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(path: Path) -> list[str]:
    return [a or b for a, b in LINK.findall(_prose(path.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_user_docs_name_no_issue_or_process(path):
    text = path.read_text(encoding="utf-8")
    found = [f"{what}: {match.group(0)!r} on line {text.count(chr(10), 0, match.start()) + 1}"
             for what, pattern in PROCESS_WORDS.items() for match in re.finditer(pattern, text, re.I)]
    assert found == []


@pytest.mark.parametrize("path", DECISIONS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_decision_notes_name_no_issue_number(path):
    text = path.read_text(encoding="utf-8")
    assert re.findall(PROCESS_WORDS["an issue number"], text, re.I) == []


@pytest.mark.parametrize("path", LINKED_DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_link_points_at_a_file_and_heading_that_exist(path):
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_the_checks_catch_what_they_look_for(tmp_path):
    """The word check and the link check fail on a doc that has what they look for, and pass on one that has not."""
    doc = tmp_path / "doc.md"
    (tmp_path / "other.md").write_text("# Speed and memory (CPU)\n\n## Speed and memory (CPU)\n", encoding="utf-8")
    doc.write_text("# A title\n\nSee [other](other.md#speed-and-memory-cpu), [again](other.md#speed-and-memory-cpu-1), "
                   "[here](#a-title), [web](https://example.org) and `[code](nowhere.md)`.\n", encoding="utf-8")
    test_every_link_points_at_a_file_and_heading_that_exist(doc)
    test_user_docs_name_no_issue_or_process(doc)
    for bad in ("[gone](missing.md)", "[gone](other.md#speed-and-memory)", "[gone](#no-such-heading)"):
        doc.write_text(f"# A title\n\n{bad}\n", encoding="utf-8")
        with pytest.raises(AssertionError):
            test_every_link_points_at_a_file_and_heading_that_exist(doc)
    for bad in ("As issue 17 asks.", "No GPU was lent.", "Under flock.", "The first tune run.", "In this task."):
        doc.write_text(f"# A title\n\n{bad}\n", encoding="utf-8")
        with pytest.raises(AssertionError):
            test_user_docs_name_no_issue_or_process(doc)


def test_the_readme_starts_with_the_two_quickstart_commands_that_ci_runs():
    """The README's first command installs what `ask` needs and asks the question whose report the README shows;
    its second is the test command, and `.ci/run` runs exactly that."""
    from tools.docs.quickstart_report import DOCUMENT, QUESTION

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first, second = re.findall(r"^```bash\n(.*?)\n```", readme, re.M | re.S)[:2]
    assert "[test" not in first and f'snapkv ask {DOCUMENT} "{QUESTION}"' in first
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.splitlines()[-1] == second
    assert re.search(r"torch==[\d.]+", first).group(0) in ci  # the same torch as the user's install
