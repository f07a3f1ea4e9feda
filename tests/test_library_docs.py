"""The library's documentation is its tested example. Every Python snippet of the docs (README.md, docs/,
constructs/README.md, the construct pages constructs/docs/) is one of three things:

- a whole file of examples/team_stack, the app the wheel test synthesizes with cdk-nag;
- an excerpt of a file of examples/, its first line naming the file (`# examples/team_stack/data_stack.py (excerpt)`):
  the lines that follow, dedented, are consecutive lines of that file, dedented;
- a program of its own, which this test runs as it stands (all of them in one process with aws-cdk-lib's template
  validation off, which the CDK CLI's --no-validation also turns off: it costs 2 s a synth, and cdk-nag is the
  example app's).

Every file of the example is shown whole, every construct page has a snippet, the index links every page, and the
public API is listed and typed."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ml_platform_constructs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE = EXAMPLES / "team_stack"
INDEX = ROOT / "constructs" / "README.md"
PAGES = sorted((ROOT / "constructs" / "docs").glob("*.md"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), INDEX, *PAGES]
EXCERPT = re.compile(r"# (examples/[\w./-]+\.py) \(excerpt\)\n")
PAGE_URL = "https://github.com/ml-platform/ml-training-platform/blob/main/constructs/docs/"


def python_snippets(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), re.S | re.M)


def kind(snippet: str) -> str:
    example_files = {p.read_text() for p in EXAMPLE.glob("*.py")}
    if snippet in example_files:
        return "file"
    return "excerpt" if EXCERPT.match(snippet) else "program"


SNIPPETS = [(doc, snippet) for doc in DOCS for snippet in python_snippets(doc)]
PROGRAMS = [(doc, snippet) for doc, snippet in SNIPPETS if kind(snippet) == "program"]
EXCERPTS = [(doc, snippet) for doc, snippet in SNIPPETS if kind(snippet) == "excerpt"]


def name(doc: Path, snippet: str) -> str:
    return f"{doc.relative_to(ROOT)}: {snippet.splitlines()[0][:60]}"


def is_excerpt_of(lines: list[str], text: str) -> bool:
    """Whether ``lines``, dedented, are consecutive lines of ``text`` dedented the same way."""
    shown = textwrap.dedent("\n".join(lines))
    source = text.splitlines()
    return any(textwrap.dedent("\n".join(source[i:i + len(lines)])) == shown
               for i in range(len(source) - len(lines) + 1))


@pytest.mark.parametrize("doc,snippet", EXCERPTS, ids=[name(*s) for s in EXCERPTS])
def test_an_excerpt_is_its_files_lines(doc, snippet):
    path, body = EXCERPT.match(snippet).group(1), snippet[EXCERPT.match(snippet).end():]
    assert (ROOT / path).exists(), f"{doc.relative_to(ROOT)}: {path} does not exist"
    assert body.strip() and is_excerpt_of(body.rstrip("\n").splitlines(), (ROOT / path).read_text()), (
        f"{doc.relative_to(ROOT)} shows lines that are not consecutive lines of {path}:\n{body[:300]}")


@pytest.fixture(scope="module")
def program_results(tmp_path_factory) -> dict[str, str]:
    """Each program's outcome ("ok" or its traceback), all run in one fresh Python process."""
    directory = tmp_path_factory.mktemp("snippets")
    (directory / "programs.json").write_text(json.dumps([snippet for _, snippet in PROGRAMS]))
    runner = textwrap.dedent("""
        import json, os, sys, tempfile, traceback
        results = []
        for program in json.load(open(sys.argv[1])):
            os.chdir(tempfile.mkdtemp())
            try:
                exec(compile(program, "<snippet>", "exec"), {"__name__": "__main__"})
                results.append("ok")
            except BaseException:
                results.append(traceback.format_exc())
        print(json.dumps(results))
    """)
    done = subprocess.run([sys.executable, "-c", runner, str(directory / "programs.json")], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "CDK_VALIDATION": "false"})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {snippet: result for (_, snippet), result in zip(PROGRAMS, results)}


@pytest.mark.parametrize("doc,snippet", PROGRAMS, ids=[name(*s) for s in PROGRAMS])
def test_a_program_runs_as_it_stands(doc, snippet, program_results):
    assert program_results[snippet] == "ok", f"{doc.relative_to(ROOT)}:\n{program_results[snippet]}"


def test_the_kinds_are_told_apart():
    whole = (EXAMPLE / "submit_job.py").read_text()
    assert kind(whole) == "file"
    assert kind("# examples/team_stack/app.py (excerpt)\nACCOUNT, REGION = ...\n") == "excerpt"
    assert kind("print('hello')\n") == "program"
    assert is_excerpt_of(["    a = 1", "    b = 2"], "def f():\n        a = 1\n        b = 2\n")
    assert not is_excerpt_of(["a = 1", "c = 3"], "a = 1\nb = 2\nc = 3\n")


def test_the_docs_show_every_file_of_the_example_whole():
    shown = {snippet for _, snippet in SNIPPETS}
    for path in EXAMPLE.glob("*.py"):
        assert path.read_text() in shown, f"{path.name} is not shown whole in the library's docs"
    # The index shows the team's app itself: its entry point and its two stacks.
    index = python_snippets(INDEX)
    for name_ in ("app.py", "data_stack.py", "training_stack.py"):
        assert (EXAMPLE / name_).read_text() in index, f"{name_} is not in constructs/README.md"


def test_every_construct_page_has_a_tested_snippet():
    assert PAGES, "constructs/docs/ has no pages"
    assert [page.name for page in PAGES if not python_snippets(page)] == []


def test_the_index_links_every_page_under_its_heading():
    text = INDEX.read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    for page in PAGES:
        linked = [section.splitlines()[0] for section in sections if f"({PAGE_URL}{page.name})" in section]
        assert linked, f"constructs/README.md has no entry linking {page.name}"


def test_the_public_api_is_listed_and_importable():
    assert sorted(ml_platform_constructs.__all__) == sorted(set(ml_platform_constructs.__all__))
    for name_ in ml_platform_constructs.__all__:
        assert hasattr(ml_platform_constructs, name_), name_
    assert (Path(ml_platform_constructs.__file__).parent / "py.typed").exists()


def test_every_public_name_is_documented_in_the_library_index():
    text = INDEX.read_text()
    undocumented = [name_ for name_ in ml_platform_constructs.__all__ if not re.search(rf"\b{name_}\b", text)]
    assert undocumented == []


def test_the_released_version_has_its_changelog_entry_first():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "constructs" / "pyproject.toml").read_text(), re.M).group(1)
    headings = re.findall(r"^## (\S+)", (ROOT / "constructs" / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == version, f"CHANGELOG.md's newest entry is {headings[0]}, the package says {version}"
