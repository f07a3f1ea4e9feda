"""The sample inputs under examples/decisions/ are what its generator writes (seeded), the drift baseline is the
drift-baseline command's output for the sample, and each local decision command reads them as the generator's
docstring says, with the verdict it shows: drift check no drift (0) on the steady hour and DRIFT (3) on the
shifted one, quality check OK (0), model judge PROMOTE (0)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "examples" / "decisions"


def generator():
    spec = importlib.util.spec_from_file_location("generate_samples", SAMPLES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_samples_are_the_generators_output(tmp_path):
    generator().main(tmp_path)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(SAMPLES) for p in SAMPLES.rglob("*") if p.is_file()
                     and p.name not in {"generate.py", "baseline.json"} and "__pycache__" not in p.parts)
    assert written == shipped
    assert all((tmp_path / p).read_bytes() == (SAMPLES / p).read_bytes() for p in written)


def test_the_shipped_baseline_is_drift_baselines_output_for_the_sample(tmp_path):
    from ops import drift_baseline

    out = tmp_path / "baseline.json"
    assert drift_baseline.main(["dev", "classifier", str(SAMPLES / "train_sample.csv"), "--exclude", "label",
                                "--output", str(out)]) in (0, None)
    assert json.loads(out.read_text()) == json.loads((SAMPLES / "baseline.json").read_text())


@pytest.mark.parametrize("capture, code, verdict", [("steady", 0, "no drift"), ("shifted", 3, "DRIFT")])
def test_drift_check_reads_the_samples(capture, code, verdict, capsys):
    from ops import drift

    assert drift.main(["check", "dev", "classifier", "--baseline", str(SAMPLES / "baseline.json"),
                       "--capture", str(SAMPLES / "capture" / capture)]) == code
    assert f"600 records; 4 feature(s) judged: {verdict}" in capsys.readouterr().out


def test_quality_check_reads_the_samples(capsys):
    from ops import quality

    assert quality.main(["check", "dev", "classifier", "--capture", str(SAMPLES / "capture" / "steady"),
                         "--labels", str(SAMPLES / "labels.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "from 600 labelled predictions" in out and out.rstrip().endswith("OK")


def test_model_judge_reads_the_samples(capsys):
    from ops import model

    assert model.main(["judge", str(SAMPLES / "judge" / "candidate.jsonl"), str(SAMPLES / "judge" / "live.jsonl")]) == 0
    assert capsys.readouterr().out.startswith("PROMOTE: ")


@pytest.mark.parametrize("module", ["drift_baseline", "drift", "quality", "model"])
def test_each_commands_help_names_a_sample_that_exists(module):
    import importlib
    import re

    doc = importlib.import_module(f"ops.{module}").__doc__
    named = re.findall(r"examples/decisions/[\w/.]+", doc)
    assert named and all((ROOT / path.rstrip(".")).exists() for path in named), named


@pytest.mark.parametrize("module, argv", [("model", ["judge", "--help"]), ("drift", ["check", "--help"]),
                                          ("quality", ["check", "--help"]), ("labels", ["--help"]),
                                          ("drift_baseline", ["--help"])])
def test_each_commands_own_help_names_a_sample(module, argv, capsys):
    import importlib

    with pytest.raises(SystemExit) as done:
        importlib.import_module(f"ops.{module}").main(argv)
    assert done.value.code == 0
    assert "examples/decisions/" in capsys.readouterr().out
