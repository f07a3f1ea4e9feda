"""The library's documentation is its tested example: every Python snippet in the READMEs is a whole file of
examples/team_stack, and every file of the example is shown; the public API is listed and typed."""

import re
from pathlib import Path

import ml_platform_constructs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "team_stack"
READMES = [ROOT / "README.md", ROOT / "constructs" / "README.md"]


def python_snippets(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), re.S | re.M)


def test_every_python_snippet_in_the_readmes_is_a_file_of_the_example():
    example_files = {p.name: p.read_text() for p in EXAMPLE.glob("*.py")}
    for readme in READMES:
        for snippet in python_snippets(readme):
            assert snippet in example_files.values(), (
                f"{readme.relative_to(ROOT)} shows Python that is not a whole file of examples/team_stack:\n{snippet[:300]}")


def test_the_library_readme_shows_every_file_of_the_example():
    shown = python_snippets(ROOT / "constructs" / "README.md")
    for path in EXAMPLE.glob("*.py"):
        assert path.read_text() in shown, f"{path.name} is not in constructs/README.md"


def test_the_public_api_is_listed_and_importable():
    assert sorted(ml_platform_constructs.__all__) == sorted(set(ml_platform_constructs.__all__))
    for name in ml_platform_constructs.__all__:
        assert hasattr(ml_platform_constructs, name), name
    assert (Path(ml_platform_constructs.__file__).parent / "py.typed").exists()


def test_every_public_name_is_documented_in_the_library_readme():
    text = (ROOT / "constructs" / "README.md").read_text()
    undocumented = [name for name in ml_platform_constructs.__all__ if not re.search(rf"\b{name}\b", text)]
    assert undocumented == []


def test_the_released_version_has_its_changelog_entry_first():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "constructs" / "pyproject.toml").read_text(), re.M).group(1)
    headings = re.findall(r"^## (\S+)", (ROOT / "constructs" / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == version, f"CHANGELOG.md's newest entry is {headings[0]}, the package says {version}"
