"""`python -m ml_platform_constructs`: the operations a team with only the library runs (AWS clients stubbed)."""

import io
import json

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
