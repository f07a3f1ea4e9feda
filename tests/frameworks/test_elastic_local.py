"""An elastic job submitted --nodes 1:2, locally, end to end (issue 40's "done when"): the plain loop at 1 node
plateaus on busy GPUs and exits 86; the queue's controller (its Lambda code, as Lambda imports it) reads the request
and resubmits the job to the stateful Batch fake at 2 nodes; the resubmission (run here with the environment the
fake gives it) resumes the same run, its GPUs idle, it scales in and exits 86; the controller resubmits it at 1 node,
which finishes. One run, its attempts at 1, 2 and 1 node(s), each resize with its measured restart and its cost in
the passport, and the controller's decisions beside the checkpoints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ml_platform_job.elastic import RESIZE_EXIT_CODE, resize_history
from ml_platform_job.tracking import RECORD_NAME

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT / "constructs" / "ml_platform_constructs" / "runtime" / "handlers"))  # as Lambda has it

import elastic_controller  # noqa: E402
from batch_fake import FakeBatch  # noqa: E402
from test_elastic_job import train as train_epochs  # noqa: E402 (the same loop, 8 epochs here)


def train(env, *, busy, losses):
    return train_epochs(env, busy=busy, losses=losses, epochs=8)


class LocalS3:
    """S3 for the controller over the job's checkpoint directory (``s3:///abs/path/`` is ``/abs/path/``)."""

    def get_object(self, Bucket, Key):  # noqa: N803 (boto3 names)
        return {"Body": open("/" + Key, "rb")}

    def put_object(self, Bucket, Key, Body):  # noqa: N803
        path = Path("/" + Key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(Body)


class Claims:
    """The controller's claims, in memory (their conditions are tested against DynamoDB in tests/unit)."""

    def __init__(self):
        self.items = {}

    def put(self, item, condition, values):
        if item["pk"] in self.items:
            raise elastic_controller.ConditionFailed(self.items[item["pk"]])
        self.items[item["pk"]] = dict(item)

    def update(self, key, event_id, **values):
        self.items[key].update(values)

    def release(self, key, event_id):
        self.items.pop(key, None)


def test_a_job_submitted_1_2_resizes_by_the_policy_as_one_run_with_each_resizes_cost(tmp_path, monkeypatch):
    root = f"s3://{tmp_path}/checkpoints/training/"
    uri = f"{tmp_path}/checkpoints/training/llm/"
    batch = FakeBatch()
    tags = {"ml-platform:queue": "training"}
    single, multi = batch.add_queue("single", tags=tags), batch.add_queue("multi", tags=tags)
    own = (("ML_PLATFORM_ELASTIC_SIZES", "1,2"),
           ("ML_PLATFORM_ELASTIC_NODE_TYPES", "spot:g5.xlarge;on-demand:g5.8xlarge"))
    definitions = {kind: batch.register(f"training-{kind}", tags=tags, environment=own) for kind in ("one", "many")}
    settings = {"JOB_QUEUE": single, "MULTI_NODE_JOB_QUEUE": multi, "SIZES": "1,2", "CHECKPOINT_ROOT": root}
    # what job submit --nodes 1:2 leaves: the job at 1 node, its range and both kinds' definitions tagged
    submitted = batch.submit_job(
        jobName="llm", jobQueue=single, jobDefinition=definitions["one"], propagateTags=True,
        tags={**tags, "ml-platform:elastic": "1:2", "ml-platform:elastic-single-node": definitions["one"],
              "ml-platform:elastic-multi-node": definitions["many"]},
        containerOverrides={"command": ["python", "train.py"], "environment": [
            {"name": "ML_PLATFORM_CHECKPOINT_URI", "value": "s3://" + uri},
            {"name": "ML_PLATFORM_JOB_NAME", "value": "llm"}, {"name": "ML_PLATFORM_ELASTIC", "value": "1:2"}]})
    local = {"ML_PLATFORM_STOP_FILE": str(tmp_path / "stop"), "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid"),
             "ML_PLATFORM_INSTANCE_TYPE": "g5.xlarge", "ML_PLATFORM_LIFECYCLE": "spot", "AWS_REGION": "us-east-1"}

    def environment(job_id):
        """The job's environment as Batch gives it (the checkpoints as the local directory the S3 stands for)."""
        job = batch.jobs[job_id]
        container = job.get("container") or job["nodeProperties"]["nodeRangeProperties"][0]["container"]
        env = {e["name"]: e["value"] for e in container["environment"]}
        env["ML_PLATFORM_CHECKPOINT_URI"] = env["ML_PLATFORM_CHECKPOINT_URI"][len("s3://"):]
        nodes = (job.get("nodeProperties") or {}).get("numNodes", 1)
        lifecycle = {"ML_PLATFORM_INSTANCE_TYPE": "g5.8xlarge", "ML_PLATFORM_LIFECYCLE": "on-demand"} \
            if nodes > 1 else {}
        return {**local, **env, **lifecycle, "ML_PLATFORM_JOB_ID": job_id,
                **({"AWS_BATCH_JOB_NUM_NODES": str(nodes)} if nodes > 1 else {})}

    claims, ids = Claims(), iter(range(1, 100))

    def ended(job_id, now):
        batch.end(job_id, RESIZE_EXIT_CODE)
        event = {"id": f"event-{next(ids)}", "detail": {"jobId": job_id, "jobName": "llm", "status": "FAILED"}}
        result = elastic_controller.resize(event, settings, batch, LocalS3(), claims, None, now)
        assert result["submitted"], result
        batch.jobs[result["newJobId"]]["status"] = "RUNNING"
        return result["newJobId"]

    with pytest.raises(SystemExit) as first:
        train(environment(submitted["jobId"]), busy=95.0, losses=[1.0, 0.9] + [0.9] * 6)
    assert first.value.code == RESIZE_EXIT_CODE
    second_id = ended(submitted["jobId"], now=1_000.0)
    assert batch.submitted()[-1]["nodeOverrides"]["numNodes"] == 2
    with pytest.raises(SystemExit) as second:
        train(environment(second_id), busy=10.0, losses=[1.0, 0.9] + [0.9] * 6)
    assert second.value.code == RESIZE_EXIT_CODE
    third_id = ended(second_id, now=2_000.0)
    assert batch.submitted()[-1]["jobQueue"] == single and "nodeOverrides" not in batch.submitted()[-1]
    record = train(environment(third_id), busy=60.0, losses=[1.0, 0.9] + [0.9] * 6)

    assert record["status"] == "FINISHED" and len({a["job_id"] for a in record["passport"]["attempts"]}) == 3
    assert [a["nodes"] for a in record["passport"]["attempts"]] == [1, 2, 1]
    prices = __import__("ml_platform_job.prices", fromlist=["load_prices"]).load_prices("us-east-1")
    resizes = resize_history(record, prices)
    assert [(r["from"], r["to"]) for r in resizes] == [(1, 2), (2, 1)]
    assert all(r["restart_seconds"] is not None and r["restart_usd"] is not None for r in resizes)
    assert json.loads(Path(uri, RECORD_NAME).read_text())["run_id"] == record["run_id"]
    decisions = sorted(Path(uri, "resizes").glob("*.json"))
    assert [json.loads(p.read_text())["to"] for p in decisions] == [2, 1]
