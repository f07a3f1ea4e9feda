"""`python -m ml_platform_constructs`: the operations a team with only the library runs (AWS clients stubbed)."""

import io
import json
import re

import pytest

from ml_platform_constructs.operations import cli as operations


class Ssm:
    def __init__(self):
        self.calls = []

    def start_automation_execution(self, **kwargs):
        self.calls.append(kwargs)
        return {"AutomationExecutionId": "exec-1"}


class Lambda:
    def __init__(self, error=None):
        self.calls, self.error = [], error

    def invoke(self, **kwargs):
        self.calls.append(kwargs)
        answer = {"Payload": io.BytesIO(json.dumps({"action": "resume", "resumed": []}).encode())}
        return answer | ({"FunctionError": "Unhandled"} if self.error else {})


def test_drift_baseline_to_a_file_needs_no_aws(tmp_path, capsys):
    sample = tmp_path / "sample.csv"
    sample.write_text("age,colour,label\n" + "".join(f"{i},{'red' if i % 2 else 'blue'},1\n" for i in range(50)))
    out = tmp_path / "baseline.json"
    assert operations.main(["drift-baseline", str(sample), "--endpoint", "team-a-clf", "--exclude", "label",
                            "--output", str(out)]) == 0
    baseline = json.loads(out.read_text())
    assert baseline["sample_size"] == 50 and list(baseline["features"]) == ["age", "colour"]
    assert "50 rows, 2 features" in capsys.readouterr().out


def test_the_baseline_goes_where_the_endpoints_drift_check_reads_it():
    assert operations.baseline_key("team-a-clf") == "drift/baselines/team-a-clf/baseline.json"


def test_dataset_build_starts_the_builders_runbook_with_its_parameters():
    ssm = Ssm()
    message = operations.start_dataset_build(ssm, runbook="Team-Runbook-1", bucket="b", name="imagenet",
                                             version="v1", prefix="datasets/imagenet/", size_gib=600)
    assert ssm.calls == [{"DocumentName": "Team-Runbook-1", "Parameters": {
        "DatasetName": ["imagenet"], "Version": ["v1"], "SourceBucket": ["b"], "SourcePrefix": ["datasets/imagenet/"],
        "SizeGiB": ["600"]}}]
    assert "exec-1" in message


def test_dataset_build_refuses_a_prefix_outside_datasets():
    with pytest.raises(SystemExit, match="a prefix under datasets/"):
        operations.start_dataset_build(Ssm(), runbook="r", bucket="b", name="x", version="v1", prefix="logs/",
                                       size_gib=10)


def test_budget_resume_invokes_the_guards_function_with_the_operator():
    client = Lambda()
    assert operations.resume_budget_stop(client, "team-guard", "alice")["action"] == "resume"
    assert json.loads(client.calls[0]["Payload"]) == {"action": "resume", "operator": "alice"}
    assert client.calls[0]["FunctionName"] == "team-guard"


def test_budget_resume_fails_loudly_when_the_function_fails():
    with pytest.raises(SystemExit, match="team-guard failed"):
        operations.resume_budget_stop(Lambda(error=True), "team-guard", "alice")


# --- issue 37: what the library's commands cannot use is one line; the exit codes are defined once -----------------

def test_the_exit_codes_are_defined_once_and_a_verdict_maps_to_them():
    assert (operations.EXIT_OK, operations.EXIT_ERROR, operations.EXIT_USAGE, operations.EXIT_DECIDED_AGAINST,
            operations.EXIT_NOT_JUDGED) == (0, 1, 2, 3, 4)
    assert [operations.verdict_exit(v) for v in (True, False, None)] == [0, 3, 4]
    refusal = operations.DecidedAgainst("refusing: worse")
    assert (refusal.code, str(refusal)) == (3, "refusing: worse") and isinstance(refusal, SystemExit)


def test_the_exit_code_table_in_commands_md_is_the_codes_defined():
    """One table in docs/COMMANDS.md, the constants here: they say the same (a code changed in one place shows)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "COMMANDS.md").read_text()
    section = text.split("## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0]: cells[1] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                             for line in section.splitlines() if re.match(r"\| \d", line))}
    meaning = {operations.EXIT_OK: "decided for", operations.EXIT_ERROR: "an error",
               operations.EXIT_USAGE: "a bad argument", operations.EXIT_DECIDED_AGAINST: "decided against",
               operations.EXIT_NOT_JUDGED: "not judged"}
    assert {int(code): text.split(":")[0].split(";")[-1].strip().removeprefix("for a command that decides, ")
            for code, text in rows.items() if code.isdigit() and int(code) < 100} == meaning
    assert rows[f"{operations.INTERRUPTED_EXIT}, 143"].startswith("ended by Ctrl-C or SIGTERM") and "141" in rows


def test_a_ragged_sample_is_refused_by_the_librarys_command_too(tmp_path, capsys):
    sample = tmp_path / "sample.csv"
    sample.write_text("age,colour\n1,red\n2\n")
    with pytest.raises(SystemExit, match=r"^error: the sample .* has 1 row\(s\) it cannot use \(row 2 \(line 3\): 1 "
                                         r"values, the header 2 columns\)"):
        operations.main(["drift-baseline", str(sample), "--endpoint", "e", "--output", str(tmp_path / "b.json")])
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("where, message", [
    ("missing/b.json", r"--output .*missing/b.json: its directory does not exist; give a file path"),
    (".", r"--output .*: a directory; give a file path in an existing directory"),
])
def test_an_output_it_cannot_write_is_one_line_before_any_work(tmp_path, where, message):
    sample = tmp_path / "sample.csv"
    sample.write_text("age\n1\n")
    with pytest.raises(SystemExit, match="^error: " + message):
        operations.main(["drift-baseline", str(sample), "--endpoint", "e", "--output", str(tmp_path / where)])


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00", r"is not UTF-8 text \(byte 0 is not: a binary file\?\): give a price table"),
    (b"", r"a readable JSON file \(Expecting value"),
    (b"[]", r": no 'regions' object with at least one Region. Fix: write it with: python -m "
            r"ml_platform_constructs prices refresh"),
    (None, r"does not exist: give a price table"),
])
def test_a_price_table_file_it_cannot_read_is_one_line(tmp_path, content, message):
    table = tmp_path / "prices.json"
    if content is not None:
        table.write_bytes(content)
    with pytest.raises(SystemExit) as done:
        operations.main(["--region", "us-east-1", "budget", "what-if", "--monthly-limit", "100", "--price-table",
                         str(table)], session_factory=lambda **kwargs: None)
    assert str(done.value.code).startswith(f"error: --price-table {table}") and "\n" not in str(done.value.code)
    assert re.search(message, str(done.value.code)), done.value.code
