"""The advisor's figures in docs/ADVISOR.md and docs/THROUGHPUT.md are the code's: generated, and compared here."""

import re
from pathlib import Path

import pytest

from ops import advise as advise_command

ROOT = Path(__file__).resolve().parents[2]
ADVISOR = (ROOT / "docs" / "ADVISOR.md").read_text()
REGENERATE = "regenerate with python -m ops.advise --presets-table / --throughput-table"


def test_the_presets_table_is_the_advisors():
    block = re.search(r"<!-- advisor-presets:begin -->\n(.*?)<!-- advisor-presets:end -->", ADVISOR, re.S).group(1)
    assert block.strip() == advise_command.presets_table().strip(), REGENERATE


def test_throughput_page_is_the_code_and_linked_from_the_advisor_page():
    assert (ROOT / "docs" / "THROUGHPUT.md").read_text() == advise_command.throughput_table(), REGENERATE
    assert "](THROUGHPUT.md)" in ADVISOR


def test_the_worked_example_is_what_the_command_prints(capsys):
    example = re.search(r"```\n\$ \./platform advise (resnet50-imagenet [^\n]*)\n(.*?)```", ADVISOR, re.S)
    argv, shown = example.group(1).split(), example.group(2)
    assert advise_command.main(argv) == 0
    printed = {line.rstrip() for line in capsys.readouterr().out.splitlines()}
    lines = [line.rstrip() for line in shown.splitlines() if line.strip() not in ("", "...")]
    assert lines and [line for line in lines if line not in printed] == []
    # the prose quotes the same figures
    recommended = next(line for line in lines if line.startswith("Recommended:"))
    usd = re.search(r"about ([\d.]+) USD and ([\d.]+) h", recommended).groups()
    assert f"for {usd[0]} USD" in ADVISOR and f"at {usd[0]} USD" in ADVISOR


def test_the_image_example_uses_the_flags_unit():
    assert "--forward-gflops 3.6    # ResNet-18: 3.6 GFLOPs forward" in ADVISOR
    assert "--forward-gflops 3.6" in advise_command.__doc__


def test_every_advise_command_on_the_page_runs_or_is_refused_as_its_comment_says(capsys):
    """The page's examples are commands a reader types: each runs (the one reading AWS aside), and the one its
    comment calls refused ends in its one-line refusal."""
    block = re.search(r"```bash\n(.*?)```", ADVISOR, re.S).group(1)
    for line in block.splitlines():
        argv = line.split("#")[0].split()[2:]
        if not argv or "--measured" in argv:
            continue
        if "refused" in line:
            with pytest.raises(SystemExit, match="not modelled|CPU-bound"):
                advise_command.main(argv)
        else:
            assert advise_command.main(argv) == 0, line
        capsys.readouterr()
