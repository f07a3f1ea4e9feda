"""Every command's default output fits a 100-column terminal (issue 37): the local commands on the sample inputs
(examples/decisions), the advisor, the budget's what-if (the app's and the library's), the cost estimate and the
lifecycle cost from the app synthesized once, and ./platform help. Long lines fold (ops.cli.fit) or tables have a
--wide form; an error is one line whatever its length (a line to read, not a table). Commands that need an AWS
account or a store are covered where their output is built: tests/unit/test_runs_ops.py, test_goodput_command.py."""

import subprocess
from pathlib import Path

import pytest

from ops.cli import COLUMNS

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "examples" / "decisions"


def widest(text: str) -> tuple[int, str]:
    return max((len(line), line) for line in text.splitlines())


def run_main(main, argv, capsys) -> str:
    try:
        main(argv)
    except SystemExit as done:  # verdict commands may raise (a line on stdout): the code is not what is tested here
        assert not isinstance(done.code, str), done.code
    out = capsys.readouterr().out
    assert out.strip(), argv
    return out


def commands():
    from ml_platform_constructs.operations import cli as library
    from ops import advise, budget, drift, model, quality

    judge = [str(SAMPLES / "judge" / "candidate.jsonl")]
    return {
        "advise preset": (advise.main, ["llm-7b-lora"]),
        "advise --all": (advise.main, ["resnet50-imagenet", "--all"]),
        "advise multi-node": (advise.main, ["llm-7b-full", "--block", "none"]),
        "model judge LIVE": (model.main, ["judge", *judge, str(SAMPLES / "judge" / "live.jsonl")]),
        "model judge --baseline": (model.main, ["judge", *judge, "--baseline", "0.95", "--baseline-n", "100"]),
        "drift check": (drift.main, ["check", "dev", "classifier", "--baseline", str(SAMPLES / "baseline.json"),
                                     "--capture", str(SAMPLES / "capture" / "shifted")]),
        "quality check": (quality.main, ["check", "dev", "classifier", "--capture", str(SAMPLES / "capture" / "steady"),
                                         "--labels", str(SAMPLES / "labels.jsonl")]),
        "budget what-if": (budget.main, ["what-if", "prod", "--running", "g6e.24xlarge=3", "--on-demand",
                                         "g6e.24xlarge=1"]),
        "library budget what-if": (library.main, ["--region", "us-east-1", "budget", "what-if", "--monthly-limit",
                                                  "1000", "--running", "g5.xlarge=2"]),
    }


@pytest.mark.parametrize("name", list(commands()))
def test_a_commands_default_output_fits_100_columns(name, capsys):
    main, argv = commands()[name]
    width, line = widest(run_main(main, argv, capsys))
    assert width <= COLUMNS, f"{name}: {width} columns: {line}"


def test_the_cost_estimate_and_the_lifecycle_cost_fit_100_columns(platform_app, capsys):
    from ops import cost_estimate, tco

    _, _, outdir = platform_app
    for main, argv in ((cost_estimate.main, ["--assembly", str(outdir)]),
                       (tco.main, ["dev", "--assembly", str(outdir)])):
        width, line = widest(run_main(main, argv, capsys))
        assert width <= COLUMNS, f"{main.__module__}: {width} columns: {line}"


def test_the_platform_scripts_help_fits_100_columns():
    help_text = subprocess.run([str(ROOT / "platform"), "help"], capture_output=True, text=True, check=True).stdout
    assert "./platform advise" in help_text
    width, line = widest(help_text)
    assert width <= COLUMNS, line


def test_fit_folds_long_lines_at_spaces_and_keeps_long_words_whole():
    from ops.cli import fit

    text = "  " + " ".join(["word"] * 40) + "\nshort\n" + "x" * 120
    folded = fit(text).splitlines()
    assert all(len(line) <= COLUMNS for line in folded[:-1]) and folded[-1] == "x" * 120
    assert folded[1].startswith("    word") and "short" in folded
    assert " ".join(line.strip() for line in folded[:-2]) == " ".join(["word"] * 40)
