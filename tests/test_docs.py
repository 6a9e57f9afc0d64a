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
