"""The README and docs/ as a new user meets them: the commands CI runs, links that resolve."""

from __future__ import annotations

import re

from .conftest import ROOT

PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text().splitlines()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    commands = [line.strip() for line in readme if line.startswith("    ")][:2]
    assert commands[0] == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tstream-server"
    assert commands[1] == ci


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_no_page_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text and "SPEC.md" not in text, page.name


def test_relative_links_and_anchors_resolve():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken
