"""Every local operator command against a fixed, seeded set of bad inputs (issue 37, item 2: a newcomer fed the
commands 165 of them; "a fuzz test over every command's arguments and file inputs keeps it so").

Each file a command reads gets each bad content (binary bytes, empty, blank lines, NUL bytes, prose, JSON of the
wrong shape, a header only, ragged rows, wrong-width capture records, NaN, string and duplicate labels), a missing
path and a directory; each numeric argument its absurd values (-1, 0, nan, 1e309, ...). Whatever comes in, the
command ends as the house style says: no traceback; an error (1) or a bad argument (2) as one line on stderr that
starts "error: "; a verdict (0 decided for, 3 against, 4 not judged) only with a result that counts and names what it
could not use, and nothing on stderr (docs/COMMANDS.md, "Exit codes"). A bad number is a bad argument: exit 2.

The commands run in-process (their main(argv)), with every AWS session stubbed to fail the test: nothing here may
reach AWS. Cases that fail in a file of another owner are xfail (strict), with the file and the change named.
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest

from ml_platform_constructs.operations import cli as library
from ml_platform_constructs.runtime.decisions import drift as drift_runtime
from ops import advise, budget, drift, drift_baseline, job_cost, labels, model, quality, runs, tco
from tests.unit.test_quality import label, record

RNG = random.Random(37)  # the seed: the same bytes every run
CONTENTS = {
    "binary": b"\xff\xfe" + bytes(RNG.randrange(256) for _ in range(510)),
    "empty": b"",
    "blank lines": b"\n \n\t\n",
    "NUL bytes": b"a\x00b\n\x00\n",
    "prose": b"not json, not csv at all\n",
    "JSON array": b"[1, 2]\n",
    "JSON null": b"null\n",
    "JSON 1e309": b"1e309\n",
    "JSON object": b'{"x": {"y": 1}}\n',
    "header only": b"a,b,c\n",
    "ragged rows": b"a,b,c\n1,2\n3,4,5,6\n",
    "truncated JSON": b'{"id": "a", "correct": tr\n',
}
FEATURES = ["a", "b", "color"]


def capture_line(values: str) -> str:
    return json.dumps({"captureData": {"endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                                                         "encoding": "CSV", "data": values}}})


# Capture files the drift and quality checks read (x.jsonl in a directory of their own), beyond CONTENTS.
CAPTURES = {
    "wrong width": "\n".join(capture_line("1,2") for _ in range(5)) + "\n",
    "wider": "\n".join(capture_line("1,2,r,4") for _ in range(5)) + "\n",
    "no rows": "\n".join(capture_line("") for _ in range(5)) + "\n",
    "BASE64 that is not": json.dumps({"captureData": {"endpointInput": {"encoding": "BASE64", "data": "%%%"},
                                                      "endpointOutput": {"encoding": "BASE64", "data": "%%%"}}}),
    "no event id": record("1", event_id=None) + "\n",
    "eventMetadata a list": json.dumps({"captureData": {"endpointOutput": {"encoding": "CSV", "data": "1"}},
                                        "eventMetadata": [1]}) + "\n",
}
# Label files (dev's classifier is binary): each refused by labels upload and quality check alike.
LABELS = {
    "duplicate ids": "\n".join([label("r1", 1), label("r1", 0)]) + "\n",
    "NaN label": '{"inferenceId": "r1", "label": NaN}\n',
    "null label": '{"inferenceId": "r1", "label": null}\n',
    "not a binary class": label("r1", 7) + "\n",
    "empty label": label("r1", "") + "\n",
    "no id": '{"label": 1}\n',
}


@dataclass
class Case:
    id: str
    main: Callable[..., int]
    argv: list[str]
    counted: Optional[str] = None  # what a 0/3/4 result must say it could not use (a substring of its output)
    code: Optional[int] = None  # the exact exit code it must end with, where one is decided (2: a bad argument)
    store: Optional[str] = None  # runs --local: the local store's directory
    marks: list = field(default_factory=list)


def other_owner(file: str, change: str):
    return pytest.mark.xfail(strict=True, reason=f"{file} (not this change's to edit): {change}")




def world(root: Path) -> dict:
    """The good files each case needs beside its bad one, and a file of each bad content."""
    rng = random.Random(37)
    paths = {"root": root, "out": root / "out" / "baseline.json"}
    (root / "out").mkdir()
    for name, content in CONTENTS.items():
        for suffix in (".jsonl", ".csv", ".json"):
            (root / f"{slug(name)}{suffix}").write_bytes(content)
        for kind in ("capture", "asm", "store"):
            (root / kind / slug(name)).mkdir(parents=True)
        (root / "capture" / slug(name) / "x.jsonl").write_bytes(content)
        (root / "asm" / slug(name) / "manifest.json").write_bytes(content)
        (root / "store" / slug(name) / "mlflow.db").write_bytes(content)
    for name, content in CAPTURES.items():
        (root / "capture" / slug(name)).mkdir(parents=True)
        (root / "capture" / slug(name) / "x.jsonl").write_text(content)
    for name, content in LABELS.items():
        (root / f"labels-{slug(name)}.jsonl").write_text(content)
    rows = [{"a": rng.gauss(0, 1), "b": rng.gauss(0, 1), "color": rng.choice("rgb")} for _ in range(400)]
    paths["baseline"] = root / "baseline.json"
    paths["baseline"].write_text(json.dumps(drift_runtime.build_baseline(rows, FEATURES)))
    good = root / "capture" / "good"
    good.mkdir()
    (good / "x.jsonl").write_text("\n".join(capture_line(f"{r['a']},{r['b']},{r['color']}") for r in rows[:120])
                                  + "\n" + "".join(record("1", inference_id=f"r{i}") + "\n" for i in range(50)))
    mixed = root / "capture" / "mixed"
    mixed.mkdir()
    (mixed / "x.jsonl").write_text((good / "x.jsonl").read_text() + CAPTURES["wrong width"] + "prose\n")
    paths["labels"] = root / "labels.jsonl"
    paths["labels"].write_text("".join(label(f"r{i}", i % 2) + "\n" for i in range(50)))
    (root / "labels-names.jsonl").write_text("".join(label(f"r{i}", "spam") + "\n" for i in range(5)))
    paths["outcomes"] = root / "outcomes.jsonl"
    paths["outcomes"].write_text("".join(json.dumps({"id": f"s{i}", "correct": i % 9 != 0}) + "\n"
                                         for i in range(300)))
    paths["sample"] = root / "sample.csv"
    paths["sample"].write_text("a,b\n" + "".join(f"{i},{i % 3}\n" for i in range(50)))
    return paths


def slug(name: str) -> str:
    return name.replace(" ", "-").lower()


def cases() -> list[Case]:
    found: list[Case] = []
    missing, directory = "{root}/no/such/file", "{root}/out"

    def files(name: str, main: Callable[..., int], argv: list[str], suffix: str = ".jsonl",
              counted: Optional[str] = None) -> None:
        """``argv`` with FILE replaced by each bad content, a missing path and a directory."""
        for content in [*CONTENTS, "missing path", "a directory"]:
            path = {"missing path": missing, "a directory": directory}.get(content, f"{{root}}/{slug(content)}{suffix}")
            found.append(Case(f"{name} [{content}]", main, [path if a == "FILE" else a for a in argv], counted))

    def numbers(name: str, main: Callable[..., int], argv: list[str], flag: str, values: list[str],
                marks: Optional[list] = None) -> None:
        """``argv`` with ``flag`` at each absurd value: a bad argument, exit 2."""
        for value in values:
            found.append(Case(f"{name} {flag} {value}", main, [*argv, flag, value], code=2, marks=marks or []))

    judge = ["judge", "{outcomes}"]
    files("model judge CANDIDATE", model.main, ["judge", "FILE", "--baseline", "0.9", "--baseline-n", "100"])
    files("model judge LIVE", model.main, ["judge", "{outcomes}", "FILE"])
    for flag, values in (("--tolerance", ["-1", "100", "nan", "1e309", "x"]), ("--alpha", ["0", "-1", "0.5", "nan"])):
        numbers("model judge", model.main, [*judge, "{outcomes}"], flag, values)
    numbers("model judge", model.main, judge, "--baseline", ["-1", "0", "1.5", "nan", "1e309", "x"])
    numbers("model judge", model.main, [*judge, "--baseline", "0.9"], "--baseline-n", ["0", "-1", "nan", "1e309"])

    sample = ["dev", "classifier", "FILE", "--output", "{out}"]
    files("drift-baseline SAMPLE.csv", drift_baseline.main, sample, suffix=".csv")
    files("drift-baseline SAMPLE.jsonl", drift_baseline.main, sample)
    files("library drift-baseline SAMPLE.csv", library.main, ["drift-baseline", "FILE", "--endpoint", "e",
                                                               "--output", "{out}"], suffix=".csv")
    for output in ("/dev/full", directory, missing):
        found.append(Case(f"drift-baseline --output {output.split('}')[-1]}", drift_baseline.main,
                          ["dev", "classifier", "{sample}", "--output", output]))
        found.append(Case(f"library drift-baseline --output {output.split('}')[-1]}", library.main,
                          ["drift-baseline", "{sample}", "--endpoint", "e", "--output", output]))
    for flag in ("--bins", "--max-categories"):
        numbers("drift-baseline", drift_baseline.main, ["dev", "classifier", "{sample}", "--output", "{out}"], flag,
                ["0", "-1", "nan", "1e309", "1001"])

    check = ["check", "dev", "classifier"]
    files("drift check --baseline", drift.main, [*check, "--baseline", "FILE", "--capture", "{root}/capture/good"],
          suffix=".json")
    for capture in [*CONTENTS, *CAPTURES]:
        found.append(Case(f"drift check --capture [{capture}]", drift.main,
                          [*check, "--baseline", "{baseline}", "--capture", f"{{root}}/capture/{slug(capture)}"]))
        found.append(Case(f"quality check --capture [{capture}]", quality.main,
                          [*check, "--capture", f"{{root}}/capture/{slug(capture)}", "--labels", "{labels}"]))
    for capture_dir in (missing, "{sample}"):
        found.append(Case(f"drift check --capture [{capture_dir[-4:]}]", drift.main,
                          [*check, "--baseline", "{baseline}", "--capture", capture_dir]))
    found.append(Case("drift check --capture [good and wrong-width records]", drift.main,
                      [*check, "--baseline", "{baseline}", "--capture", "{root}/capture/mixed"],
                      counted="56 record(s) unusable: 55 a CSV row has 2 values, the baseline 3 features"))
    found.append(Case("quality check --capture [good and garbage records]", quality.main,
                      [*check, "--capture", "{root}/capture/mixed", "--labels", "{labels}"],
                      counted="unusable: 126 capture record(s), not counted"))

    quality_argv = [*check, "--capture", "{root}/capture/good", "--labels"]
    files("quality check --labels", quality.main, [*quality_argv, "FILE"])
    files("labels upload FILE", labels.main, ["upload", "dev", "classifier", "FILE"])
    for name in LABELS:
        found.append(Case(f"quality check --labels [{name}]", quality.main,
                          [*quality_argv, f"{{root}}/labels-{slug(name)}.jsonl"]))
        found.append(Case(f"labels upload [{name}]", labels.main,
                          ["upload", "dev", "classifier", f"{{root}}/labels-{slug(name)}.jsonl"]))
    found.append(Case("quality check --labels [class names against numbers]", quality.main,
                      [*quality_argv, "{root}/labels-names.jsonl"],
                      counted="unusable: 5 labelled prediction(s), not counted: 5 a label that cannot be compared"))
    good_quality = [*quality_argv, "{labels}"]
    numbers("quality check", quality.main, good_quality, "--baseline", ["-1", "0", "1.5", "nan", "1e309", "x"])
    numbers("quality check", quality.main, [*good_quality, "--baseline", "0.9"], "--baseline-n", ["0", "-1", "x"])
    numbers("quality check", quality.main, good_quality, "--labels-per-hour", ["0", "-1", "nan", "1e309", "x"])

    # advise reads an empty file as 0 records and says so (it counts: "0 measured benchmark records from FILE").
    files("advise --measured", advise.main, ["resnet50-imagenet", "--measured", "FILE"],
          counted="0 measured benchmark records from ")
    for flag in ("--deadline-hours", "--checkpoint-minutes", "--startup-minutes"):
        numbers("advise", advise.main, ["resnet50-imagenet"], flag, ["-1", "nan", "1e309"])

    for content in [*CONTENTS, "missing path", "a directory", "a file"]:
        where = {"missing path": missing, "a directory": directory, "a file": "{sample}"}.get(
            content, f"{{root}}/asm/{slug(content)}")
        found.append(Case(f"tco --assembly [{content}]", tco.main, ["dev", "--assembly", where, "--job-usd", "10"]))
    tco_argv = ["dev", "--assembly", missing]  # every figure is refused before the assembly is read
    for flag, values in (("--months", ["0", "-1", "121", "nan", "1e309"]), ("--storage-gb", ["-1", "nan", "1e309"]),
                         ("--ingest-gb-month", ["-1", "inf"]), ("--jobs-per-month", ["-1", "nan", "1e309"]),
                         ("--job-usd", ["-1", "nan", "1e309"]), ("--models", ["0", "-1", "nan"]),
                         ("--custom-metrics", ["-1", "1e309"])):
        numbers("tco", tco.main, tco_argv, flag, values)
    found.append(Case("tco --job-hours without --job-usd", tco.main, [*tco_argv, "--job-hours", "3"], code=2))

    files("runs show --record", runs.main, ["show", "--record", "FILE"], suffix=".json")
    for content in CONTENTS:
        found.append(Case(f"runs show --local [store: {content}]", runs.main, ["show", "--local", "run-1"],
                          store=f"{{root}}/store/{slug(content)}"))
        found.append(Case(f"runs list --local [store: {content}]", runs.main, ["list", "--local"],
                          store=f"{{root}}/store/{slug(content)}"))

    files("library budget what-if --price-table", library.main,
          ["--region", "us-east-1", "budget", "what-if", "--monthly-limit", "100", "--price-table", "FILE"],
          suffix=".json")
    what_if = ["what-if", "dev"]
    library_what_if = ["--region", "us-east-1", "budget", "what-if", "--monthly-limit", "100"]
    for flag, values in (("--actual", ["-1", "nan", "1e309", "x"]), ("--budget-age-hours", ["-1", "745", "nan"]),
                         ("--running", ["g5.xlarge=0", "g5.xlarge=1@nan", "g5.xlarge", "g5.xlarge=1@1e309"]),
                         ("--now", ["garbage", "2026-13-45"])):
        numbers("budget", budget.main, what_if, flag, values)
        numbers("library budget", library.main, library_what_if, flag, values)
    numbers("library budget", library.main, library_what_if[:-2], "--monthly-limit", ["0", "-1", "nan", "1e309"])
    numbers("library budget", library.main, library_what_if, "--stop-at-percent", ["0", "101", "nan"])
    found.append(Case("budget --running unpriced type", budget.main, [*what_if, "--running", "no.such=1"], code=2))
    found.append(Case("library budget --running unpriced type", library.main,
                      [*library_what_if, "--running", "no.such=1"], code=2))

    for argv, marks in ((["--instance-type", "g5.xlarge"], []), (["--lifecycle", "spot"], []),
                        (["--instance-type", "no.such", "--lifecycle", "spot"], []), (["--lifecycle", "sometimes"], [])):
        found.append(Case(f"job cost {' '.join(argv)}", job_cost.main, ["dev", "job-1", *argv], code=2, marks=marks))
        found.append(Case(f"library job cost {' '.join(argv)}", library.main,
                          ["--region", "us-east-1", "job", "cost", "job-1", *argv], code=2))
    return found


CASES = cases()


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return world(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def configured():
    """The environments as config loads them, once: loading is most of a command's time here (the Regions through
    jsii), and what is fuzzed is the input, not the config."""
    import functools

    import ops.aws_access

    return functools.lru_cache(maxsize=None)(ops.aws_access.environment)


@pytest.fixture(autouse=True)
def no_aws(monkeypatch, configured):
    """A case that reaches AWS has let a bad input through: the stub fails the test (as a traceback would)."""
    def reached(*args, **kwargs):
        raise AssertionError("reached AWS with a bad input")

    import ops.aws_access

    for module in (ops.aws_access, labels, drift_baseline):
        monkeypatch.setattr(module, "session_for", reached, raising=False)
    monkeypatch.setattr(library, "Session", reached)
    for module in (ops.aws_access, labels, drift, quality, drift_baseline, budget, tco, model):
        monkeypatch.setattr(module, "environment", configured)


def invoke(main: Callable[..., int], argv: list[str], capsys) -> tuple[int, str, str]:
    """``main(argv)`` as the interpreter would end it: its return value or SystemExit's code (a message is printed on
    stderr and exits 1); any other exception is a traceback, and fails the case with it."""
    try:
        code = main(argv)
    except SystemExit as done:
        code = done.code
    except BaseException:  # noqa: B902 - whatever escapes main would be a traceback on the terminal
        pytest.fail(f"a traceback:\n{traceback.format_exc()}")
    out, err = capsys.readouterr()
    if isinstance(code, str):
        code, err = 1, err + code + "\n"
    return (0 if code is None else code), out, err


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_a_bad_input_ends_in_one_line_or_a_result_that_counts_it(case, paths, capsys, monkeypatch):
    argv = [a.format(**paths) for a in case.argv]
    if case.store:
        monkeypatch.setattr(runs, "LOCAL_STORE", Path(case.store.format(**paths)))
    code, out, err = invoke(case.main, argv, capsys)
    assert "Traceback" not in err + out
    assert code in (0, 1, 2, 3, 4), (code, err)
    if case.code is not None:
        assert code == case.code, (code, err)
    if code in (1, 2):
        assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
        assert out == "", out
    else:  # a verdict or a result: only one that says what it could not use, and no error beside it
        assert case.counted is not None, f"accepted with exit {code}, counting nothing:\n{out}"
        assert case.counted in " ".join(out.split()), out
        assert err == ""


def test_the_fuzz_covers_every_local_command_and_each_kind_of_bad_input():
    """The set itself, so that a change of it that drops a command or a kind of input is seen."""
    commands = {case.id.split(" [")[0].split(" --")[0].split(" -")[0] for case in CASES}
    assert {"model judge CANDIDATE", "model judge LIVE", "drift-baseline SAMPLE.csv",
            "library drift-baseline SAMPLE.csv", "drift check", "quality check", "labels upload FILE", "advise", "tco",
            "runs show", "runs list", "budget", "library budget", "job cost", "library job cost"} <= commands, commands
    kinds = {case.id.split(" [")[-1].rstrip("]") for case in CASES if " [" in case.id}
    assert {*CONTENTS, *CAPTURES, *LABELS, "missing path", "a directory"} <= kinds
    assert len(CASES) > 300
