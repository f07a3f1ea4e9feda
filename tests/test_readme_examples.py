"""The docs' example sessions print what the commands print: every `$ ./platform ...` block of README.md, docs/,
constructs/README.md and constructs/docs/ whose command runs without AWS is run here and its output compared, figure
by figure, so a change that moves a number moves the docs.

In an example, a line "..." (or "..." within a line) stands for output the example leaves out; line breaks are
free, since the docs wrap long lines."""

import re
import shlex
from pathlib import Path

import pytest

from ops import budget, cost_estimate
from ops.local import up

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "constructs" / "README.md",
        *sorted((ROOT / "constructs" / "docs").glob("*.md"))]

# Commands that need no AWS account, and how the test runs them (the synthesized app for the cost estimate).
RUNNERS = {
    "./platform budget": lambda args, assembly: budget.main(args),
    "./platform cost": lambda args, assembly: cost_estimate.main([*args, "--assembly", str(assembly)]),
}
# Examples not run here, and why.
NOT_RUN = {
    "./platform advise": "the advisor's worked example (docs/ADVISOR.md) abridges lines without '...'; "
                         "tests/unit/test_advisor_docs.py compares each line it shows",
    "./platform up": "a deploy to the emulator (a minute): its figures are compared line by line instead, the "
                     "estimates below, the validation's in tests/compliance and the emulator's in tests/emulator",
    "./platform job rehearse": "a PyTorch job run three times, in the frameworks tier's environment: the rehearsal's "
                               "checks and verdict lines are tested there (tests/frameworks) and in "
                               "tests/unit/test_rehearsal.py",
}


def examples() -> list[tuple[str, str, str]]:
    """(page, command line, the output it shows) for each fenced block that starts with `$ ./platform`."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"^```[a-z]*\n(\$ \./platform .*?)^```$", doc.read_text(), re.S | re.M):
            command, _, output = block.partition("\n")
            found.append((doc.relative_to(ROOT).as_posix(), command.removeprefix("$ "), output))
    return found


def runner(command: str) -> str:
    return next((prefix for prefix in [*RUNNERS, *NOT_RUN] if f"{command} ".startswith(prefix + " ")), "")


def shows(example: str, output: str) -> bool:
    """Whether the output is the example's text, word for word and figure for figure, with '...' as any text."""
    parts = [re.escape(" ".join(part.split())) for part in example.split("...")]
    return re.fullmatch(r"\s*" + r".*?".join(parts) + r"\s*", " ".join(output.split()), re.S) is not None


def test_every_example_session_is_run_or_says_why_not():
    commands = [command for _, command, _ in examples()]
    assert {runner(c) for c in commands} >= {"./platform budget", "./platform cost", "./platform up"}
    assert [c for c in commands if not runner(c)] == []


def test_the_only_up_example_is_the_readmes():
    # The README's excerpt is the one the tests below compare; another page would show its own, untested.
    assert [page for page, command, _ in examples() if command == "./platform up"] == ["README.md"]


RUN = [example for example in examples() if runner(example[1]) in RUNNERS]


@pytest.mark.parametrize("page,command,shown", RUN, ids=[f"{page}: {command}" for page, command, _ in RUN])
def test_the_example_prints_what_the_command_prints(page, command, shown, platform_app, capsys):
    _, _, assembly = platform_app
    args = shlex.split(command)[2:]
    assert RUNNERS[runner(command)](args, assembly) == 0
    output = capsys.readouterr().out
    assert shows(shown, output), f"{page}: `{command}` now prints:\n{output}"


@pytest.mark.parametrize("example,output,shown", [
    ("a 1.00\n...\nc 3.00", "a 1.00\nb 2.00\nc 3.00\n", True),
    ("a 1.00\nc 3.00", "a 1.00\nb 2.00\nc 3.00\n", False),  # an omission without "..."
    ("a 1.00 and\nb", "a 1.00 and b\n", True),  # wrapped
    ("a 1.00", "a 1.01\n", False),  # a figure moved
    ("about ... USD", "about 928 USD", True),
])
def test_an_example_matches_figure_for_figure(example, output, shown):
    assert shows(example, output) is shown


def readme_example(command: str) -> list[str]:
    """The lines a page's `$ <command>` session shows."""
    [shown] = [output for _, line, output in examples() if line == command]
    return shown.splitlines()


def test_the_up_example_shows_each_environments_estimate(platform_app):
    _, _, assembly = platform_app
    shown = readme_example("./platform up")
    estimates = cost_estimate.estimates(assembly, cost_estimate.Assumptions())
    assert [line for line in up.estimate_lines(estimates) if line not in shown] == []
