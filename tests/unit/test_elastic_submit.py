"""Submitting an elastic job (--nodes MIN:MAX, jobs.submit_job(nodes=(MIN, MAX))): it starts at MIN, carries the range
in its environment (the job's policy) and tags (the controller), and the definition of each size's kind with its
image; a queue without elastic jobs, a range it cannot run, or GPUs its multi-node types lack are refused before
any AWS call, in one line that says what to do."""

import pytest

from ml_platform_constructs.operations import cli as operations
from ml_platform_constructs.operations import jobs
from test_library_jobs import ARN, IMAGE, FakeBatch, cli


def elastic_batch(sizes="1,2,4"):
    """The "training" queue of test_library_jobs, deployed with elastic_max_nodes (its definitions tell the sizes)."""
    batch = FakeBatch()
    for definition in batch.definitions:
        container = definition.get("containerProperties") or definition["nodeProperties"]["nodeRangeProperties"][0][
            "container"]
        container["environment"] = [{"name": "ML_PLATFORM_ELASTIC_SIZES", "value": sizes}]
    return batch


def test_the_queue_tells_its_elastic_sizes():
    assert jobs.find_queue(elastic_batch(), "training").elastic_sizes == (1, 2, 4)
    assert jobs.find_queue(FakeBatch(), "training").elastic_sizes == ()


def test_an_elastic_job_starts_at_min_on_the_single_node_queue_with_its_range_and_both_definitions():
    batch = elastic_batch()
    jobs.submit_job(batch, queue="training", name="llm-1", image=IMAGE, command=["python", "train.py"], nodes=(1, 4))
    [request] = batch.submitted
    assert request["jobQueue"] == f"{ARN}:job-queue/q1" and "nodeOverrides" not in request
    assert {"name": "ML_PLATFORM_ELASTIC", "value": "1:4"} in request["containerOverrides"]["environment"]
    assert request["tags"]["ml-platform:elastic"] == "1:4"
    assert request["tags"]["ml-platform:elastic-single-node"] == f"{ARN}:job-definition/train:2"
    assert request["tags"]["ml-platform:elastic-multi-node"] == f"{ARN}:job-definition/mnp:1"


def test_another_image_registers_both_kinds_so_that_a_resize_keeps_the_image():
    batch = elastic_batch()
    other = IMAGE.replace(":1", ":2")
    jobs.submit_job(batch, queue="training", name="llm-1", image=other, command=["python", "train.py"], nodes=(2, 4))
    assert sorted(r["jobDefinitionName"] for r in batch.registered) == ["mnp-submitted", "train-submitted"]
    [request] = batch.submitted
    assert request["nodeOverrides"]["numNodes"] == 2
    assert request["tags"]["ml-platform:elastic-multi-node"].endswith("job-definition/mnp-submitted:1")
    assert request["tags"]["ml-platform:elastic-single-node"].endswith("job-definition/train-submitted:1")


@pytest.mark.parametrize("batch, nodes, message", [
    (FakeBatch(), (1, 4), "queue training has no elastic jobs (nothing would resubmit a resized job); deploy it with "
                          "TrainingQueue(elastic_max_nodes=...)"),
    (elastic_batch("1,2"), (1, 4), "multi-node environment fits at most 2 nodes"),
    (elastic_batch("1,2,4"), (3, 4), "runs elastic jobs at 1, 2, 4 node(s); MIN must be one of them"),
])
def test_a_range_the_queue_cannot_run_is_refused_before_aws(batch, nodes, message):
    with pytest.raises(jobs.JobError, match=message.replace("(", r"\(").replace(")", r"\)")):
        jobs.submit_job(batch, queue="training", name="llm-1", image=IMAGE, command=["python"], nodes=nodes)
    assert batch.submitted == [] and batch.registered == []


def test_an_elastic_job_keeps_gpus_every_size_holds():
    target = jobs.find_queue(elastic_batch(), "training")
    target = jobs.QueueTarget(**{**target.__dict__, "instance_types": ("g5.12xlarge",),
                                 "multi_node_instance_types": ("g5.8xlarge",)})
    with pytest.raises(jobs.JobError, match="--gpus 4: an elastic job keeps its GPUs per node .* ask --gpus 1"):
        jobs.check_submission(target, IMAGE, ["python"], nodes=(1, 2), name="llm-1")


@pytest.mark.parametrize("text, parsed", [("2", 2), ("1:8", (1, 8)), ("4:4", 4)])
def test_nodes_takes_a_count_or_a_range(text, parsed):
    assert operations.node_spec(8)(text) == parsed


@pytest.mark.parametrize("text, message", [("0:4", "out of range"), ("4:2", "out of range"), ("1:9", "out of range"),
                                           ("a", "not a whole number"), ("1:2:3", "not a whole number")])
def test_nodes_refuses_anything_else_in_one_line(text, message):
    with pytest.raises(Exception, match=message):
        operations.node_spec(8)(text)


def test_the_cli_submits_an_elastic_job(capsys):
    batch = elastic_batch()
    cli(["job", "submit", "training", "--image", IMAGE, "--name", "llm-1", "--nodes", "1:4", "--",
         "python", "train.py"], batch=batch)
    assert batch.submitted[0]["tags"]["ml-platform:elastic"] == "1:4"
    assert "elastic 1:4, starting at 1 node(s)" in capsys.readouterr().out

