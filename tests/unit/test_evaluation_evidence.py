"""The evaluation job under its own role (issue 26, finding 1): the role writes evaluations/<queue>/ and cannot read
it, so the manifest is built from what the job scored, never read back; and it names the objects that were scored."""

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from iam_policy import Request, allowed, role_statements
from ml_platform_job import evaluation
from tests.unit.test_training_queue import queue_stack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_with_checkpoints.py"
spec = importlib.util.spec_from_file_location("train_with_checkpoints_evaluation", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

BUCKET = "datasets-bucket"
OUT = f"s3://{BUCKET}/evaluations/training/run-1/live-1/"


@pytest.fixture(scope="module")
def role(synth_stack):
    """The evaluation role's statements and the bucket's ARN as they resolve in the template."""
    template = synth_stack(queue_stack).to_json()
    definitions = {r["Properties"]["Tags"].get("ml-platform:job-definition"): r["Properties"]
                   for r in template["Resources"].values() if r["Type"] == "AWS::Batch::JobDefinition"}
    role_id = definitions["evaluation"]["ContainerProperties"]["JobRoleArn"]["Fn::GetAtt"][0]
    statements = role_statements(template, role_id)
    # The bucket the role's object grants name (the DatasetBucket; its access-log bucket is another).
    (bucket,) = {part["Fn::GetAtt"][0] for s in statements for r in (s["Resource"] if isinstance(s["Resource"], list)
                 else [s["Resource"]]) if "Fn::Join" in r for part in r["Fn::Join"][1] if "Fn::GetAtt" in part}
    return statements, "${" + bucket + ".Arn}"


class AsTheRole:
    """An S3 client that answers as S3 would under the role's policy (AccessDenied where it allows nothing)."""

    def __init__(self, s3, statements, bucket_arn):
        self.s3, self.statements, self.bucket_arn, self.exceptions = s3, statements, bucket_arn, s3.exceptions
        self.denied = []

    def _check(self, action, key, operation):
        if not allowed(self.statements, Request(action, f"{self.bucket_arn}/{key}")):
            self.denied.append((action, key))
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, operation)

    def get_object(self, Bucket, Key):
        self._check("s3:GetObject", Key, "GetObject")
        return self.s3.get_object(Bucket=Bucket, Key=Key)

    def put_object(self, Bucket, Key, Body):
        self._check("s3:PutObject", Key, "PutObject")
        return self.s3.put_object(Bucket=Bucket, Key=Key, Body=Body)


def test_the_role_writes_its_evidence_and_cannot_read_it_back(role):
    statements, bucket = role
    assert allowed(statements, Request("s3:PutObject", f"{bucket}/evaluations/training/run/live/candidate.jsonl"))
    assert not allowed(statements, Request("s3:GetObject", f"{bucket}/evaluations/training/run/live/candidate.jsonl"))
    assert not allowed(statements, Request("s3:PutObject", f"{bucket}/evaluations/other-queue/run/live/evaluation.json"))
    for readable in ("datasets/blobs/v1/data.csv", "checkpoints/training/job/model.tar.gz",
                     "models/classifier/v1/model.tar.gz"):
        assert allowed(statements, Request("s3:GetObject", f"{bucket}/{readable}")), readable


def model_archive(features=8, classes=3, scale=0.0):
    state = example.new_state(features, classes)
    state["weights"] = [[scale * (i - j) for j in range(features)] for i in range(classes)]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        body = json.dumps({"weights": state["weights"], "bias": state["bias"]}).encode()
        info = tarfile.TarInfo("model.json")
        info.size = len(body)
        archive.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def test_the_example_evaluation_job_finishes_under_the_role_and_its_manifest_names_what_it_scored(role, monkeypatch):
    """Under 0.5.0 finish() read candidate.jsonl back: AccessDenied, and the job failed after scoring."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        real = boto3.client("s3")
        real.create_bucket(Bucket=BUCKET)
        real.put_object(Bucket=BUCKET, Key="datasets/blobs/v1/data.csv", Body=example.make_dataset(samples=400).encode())
        candidate, live = model_archive(scale=0.3), model_archive(scale=0.1)
        real.put_object(Bucket=BUCKET, Key="checkpoints/training/job/model.tar.gz", Body=candidate)
        real.put_object(Bucket=BUCKET, Key="models/classifier/live-1/model.tar.gz", Body=live)
        s3 = AsTheRole(real, *role)
        env = {"ML_PLATFORM_DATASETS_URI": f"s3://{BUCKET}/datasets/",
               evaluation.CANDIDATE_MODEL: f"s3://{BUCKET}/checkpoints/training/job/model.tar.gz",
               evaluation.LIVE_MODEL: f"s3://{BUCKET}/models/classifier/live-1/model.tar.gz", evaluation.OUTPUT: OUT}
        assert example.main(["--evaluate"], env=env, s3=s3) == 0
        assert s3.denied == []
        _, _, manifest = evaluation.read_evidence(OUT, real)  # the operator reads it
        etag = real.head_object(Bucket=BUCKET, Key="checkpoints/training/job/model.tar.gz")["ETag"]
        assert manifest["artifacts"]["candidate"] == {
            "uri": env[evaluation.CANDIDATE_MODEL], "etag": etag, "version_id": None, "bytes": len(candidate),
            "sha256": hashlib.sha256(candidate).hexdigest()}
        assert manifest["artifacts"]["live"]["sha256"] == hashlib.sha256(live).hexdigest()
        assert manifest["candidate"]["examples"] == manifest["live"]["examples"] > 0


def test_a_manifest_that_cannot_name_the_scored_model_is_not_written(tmp_path):
    """Outcomes written without reading the model through the contract: promote could not check what it deploys."""
    job = evaluation.Evaluation(str(tmp_path / "model.tar.gz"), None, evaluation._Place(str(tmp_path / "out")))
    job.write_outcomes(evaluation.CANDIDATE, {"a": True})
    with pytest.raises(ValueError, match=r"^the candidate model was not read with Evaluation.model: the manifest must "
                                         r"name the artifact that was scored"):
        job.finish()
    (tmp_path / "model.tar.gz").write_bytes(b"m")
    live = evaluation.Evaluation(str(tmp_path / "model.tar.gz"), str(tmp_path / "model.tar.gz"),
                                 evaluation._Place(str(tmp_path / "out")))
    live.model(evaluation.CANDIDATE)
    live.model(evaluation.LIVE)
    live.write_outcomes(evaluation.CANDIDATE, {"a": True})
    with pytest.raises(ValueError, match=r"^no live outcomes: call write_outcomes\('live', ...\) before finish\(\)$"):
        live.finish()
    assert not (tmp_path / "out" / evaluation.MANIFEST).exists()


class _ChunksOnly:
    """An S3 body as botocore streams it; reading it whole fails (a large model must not be held in memory)."""

    def __init__(self, data, chunk):
        self.data, self.chunk = data, chunk

    def read(self, *args):
        raise AssertionError("the whole archive was read into memory")

    def iter_chunks(self, size):
        for start in range(0, len(self.data), self.chunk):
            yield self.data[start:start + self.chunk]


def test_a_model_archive_streams_to_disk_in_chunks_with_its_identity(tmp_path):
    """Evaluation.model_file: a model of any size goes to a file chunk by chunk, never whole in memory, and the
    manifest's identity (sha256, bytes, ETag, version) is the very object streamed, as read_artifact's is."""
    import hashlib

    from ml_platform_job import evaluation

    data = bytes(range(256)) * 4000  # about 1 MB, in 64 KiB chunks

    class S3:
        def get_object(self, Bucket, Key):  # noqa: N803
            assert (Bucket, Key) == ("models", "runs/r1/model.tar.gz")
            return {"Body": _ChunksOnly(data, 64 * 1024), "ETag": '"abc"', "VersionId": "v7"}

    contract = evaluation.Evaluation("s3://models/runs/r1/model.tar.gz", None, evaluation._Place(str(tmp_path / "out")))
    path = contract.model_file(evaluation.CANDIDATE, tmp_path / "models", s3=S3())
    assert path.read_bytes() == data
    assert contract._artifacts[evaluation.CANDIDATE] == {
        "uri": "s3://models/runs/r1/model.tar.gz", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
        "etag": '"abc"', "version_id": "v7"}
    assert contract.model_file(evaluation.LIVE, tmp_path / "models", s3=S3()) is None
