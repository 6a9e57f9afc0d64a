"""The documentation users get: docs/ exists, its links resolve, and nothing cites a document
outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKDOWN = [REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").glob("*.md")]
SOURCES = [
    p
    for folder in ("oahu", "streams", "connectors", "benchmarks", "tests", "docs")
    for p in (REPO / folder).rglob("*")
    if p.suffix in (".py", ".md") and "results" not in p.parts and p != Path(__file__).resolve()
]


def test_docs_cover_algorithms_architecture_messages_and_delivery():
    names = {p.name for p in (REPO / "docs").glob("*.md")}
    assert {"algorithms.md", "architecture.md", "messages.md", "delivery.md"} <= names
    algorithms = (REPO / "docs" / "algorithms.md").read_text()
    for equation in ("Eq. 1", "Eq. 6-13", "Eq. 19", "Eq. 20", "Eq. 21", "Eq. 22", "Eq. 23-25"):
        assert equation in algorithms, equation
    assert "## OAHU's learning extensions (ours)" in algorithms.replace("### ", "## ")


def test_relative_links_resolve():
    for page in MARKDOWN:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.relative_to(REPO)} links {target}"


def test_no_reference_to_documents_users_do_not_have():
    cited = re.compile(r"SPEC\s*§|SPEC\.md|\.\./shared")
    offenders = [str(p.relative_to(REPO)) for p in SOURCES if cited.search(p.read_text())]
    offenders += [str(p.name) for p in MARKDOWN if cited.search(p.read_text())]
    assert offenders == []


def _where_things_live() -> dict[str, str]:
    """docs/architecture.md's "Where things live" table: folder → the text of its row."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        folder = re.match(r"`([\w/]+/)`", cells[0]) if len(cells) == 2 else None
        if folder:
            rows[folder.group(1)] = cells[1]
    return rows


def test_the_architecture_table_names_every_module_of_the_package():
    rows = _where_things_live()
    package = REPO / "oahu"
    missing = []
    for module in sorted(package.rglob("*.py")):
        if module.name == "__init__.py":
            continue
        folder = module.parent.relative_to(REPO).as_posix() + "/"
        if f"`{module.name}`" not in rows.get(folder, ""):
            missing.append(module.relative_to(REPO).as_posix())
    assert missing == [], "docs/architecture.md, Where things live, does not name these"
    # And names nothing that is not there: a row for a folder or module that moved away.
    for folder, row in rows.items():
        if folder.startswith("oahu/"):
            assert (REPO / folder).is_dir(), folder
            for name in re.findall(r"`(\w+\.py)`", row):
                assert (REPO / folder / name).exists(), folder + name
    assert {"streams/", "connectors/"} <= set(rows)
