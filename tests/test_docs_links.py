"""Every link in the docs resolves, and the README stays the front door.

The docs are README.md, docs/*.md, constructs/README.md and constructs/docs/*.md. A link resolves when its file
exists in the checkout (a relative path, or an absolute link to this repository's github.com/.../blob/main/ or
tree/main/) and its #anchor is a heading of that file by GitHub's slug rules. constructs/README.md is also the
wheel's description on the package index, where relative links break: its links are absolute. Links elsewhere on
the web are not fetched here."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "constructs" / "README.md",
        *sorted((ROOT / "constructs" / "docs").glob("*.md"))]
REPOSITORY = "https://github.com/ml-platform/ml-training-platform/"
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
# [text](target) or ![alt](target "title"): the text may hold one level of brackets, the target one of parentheses.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
                  r"\(\s*<?([^()\s<>]+(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text with fenced code blocks and code spans blanked (links and headings inside code are not links)."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), FENCE.sub("", text))


def links(path: Path) -> list[str]:
    text = prose(path.read_text())
    return LINK.findall(text) + REFERENCE.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links, code and emphasis markers dropped) lower-cased, every
    character but letters, digits, spaces, '-' and '_' removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower().replace("`", "")
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the file's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for _, heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading.strip())
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def target(doc: Path, link: str) -> tuple[Path | None, str]:
    """(the file or folder a link names, its anchor); None for a link outside this repository."""
    address, _, anchor = link.partition("#")
    if address.startswith(REPOSITORY):
        rest = address[len(REPOSITORY):]
        match = re.match(r"(?:blob|tree)/main/(.*)$", rest)
        assert match or rest in ("", "/"), f"{doc.relative_to(ROOT)}: {link} is not a file or folder on main"
        return ROOT / (match.group(1) if match else ""), anchor
    if re.match(r"^[a-z][a-z0-9+.-]*:", address):  # another site, mailto:
        return None, ""
    return (doc.parent / address).resolve() if address else doc, anchor


def broken(doc: Path) -> list[str]:
    problems = []
    for link in links(doc):
        path, anchor = target(doc, link)
        if path is None:
            continue
        if not path.resolve().is_relative_to(ROOT):
            problems.append(f"{link}: outside the repository")
        elif not path.exists():
            problems.append(f"{link}: {path.relative_to(ROOT)} does not exist")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{link}: {path.relative_to(ROOT)} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=[d.relative_to(ROOT).as_posix() for d in DOCS])
def test_every_link_resolves(doc):
    assert broken(doc) == []


def test_the_docs_have_links_to_check():
    assert sum(len(links(doc)) for doc in DOCS) > 200


def test_the_readme_is_the_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move a topic to docs/"


def test_the_readme_maps_every_page_of_docs():
    linked = {target(ROOT / "README.md", link)[0] for link in links(ROOT / "README.md")}
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked] == []


def test_the_library_index_links_only_absolutely():
    # The wheel's description on the package index: a relative link would lead nowhere there.
    relative = [link for link in links(ROOT / "constructs" / "README.md")
                if not re.match(r"^(https?:|mailto:|#)", link)]
    assert relative == []


@pytest.mark.parametrize("heading,anchor", [
    ("Production quality: EndpointQuality", "production-quality-endpointquality"),
    ("Updates that take themselves back, and a declared model version",
     "updates-that-take-themselves-back-and-a-declared-model-version"),
    ("1. Callers pass `InferenceId`", "1-callers-pass-inferenceid"),
    ("The baseline is the live model's held-out score", "the-baseline-is-the-live-models-held-out-score"),
    ("Choosing GPUs by cost per job: advisor, TCO, cost per accuracy point",
     "choosing-gpus-by-cost-per-job-advisor-tco-cost-per-accuracy-point"),
    ("What `up` shows", "what-up-shows"),
    ("A team’s own key", "a-teams-own-key"),
    ("`ml_platform_constructs.runtime` & friends", "ml_platform_constructsruntime--friends"),
])
def test_anchors_follow_githubs_slug_rules(heading, anchor):
    assert slug(heading) == anchor


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A page\n\n## Its part\n")
    doc = tmp_path / "README.md"
    doc.write_text("[ok](docs/A.md#its-part) [gone](docs/B.md) [no part](docs/A.md#other) `[code](docs/C.md)`\n"
                   f"[abs]({REPOSITORY}blob/main/docs/A.md#a-page) [abs gone]({REPOSITORY}blob/main/docs/D.md)\n"
                   "```\n[fenced](docs/E.md)\n```\n[web](https://docs.aws.amazon.com/x.html#y)\n")
    assert [problem.split(": ")[0] for problem in broken(doc)] == [
        "docs/B.md", "docs/A.md#other", f"{REPOSITORY}blob/main/docs/D.md"]
