"""The multi-node example hands torchrun the rendezvous Batch describes (main node address, node rank, node count),
through the job side's launcher (which exits 143 when the job is stopped: tests/unit/test_job_launch.py); an elastic
job resized to 1 node, on the single-node queue, runs torchrun standalone on its one node (a real resize through it:
tests/frameworks/test_elastic_resize.py)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "multinode_torchrun.sh"


def run(env, tmp_path):
    fake = tmp_path / "torchrun"
    fake.write_text('#!/usr/bin/env bash\necho "$@"\n')
    fake.chmod(0o755)
    return subprocess.run(["bash", str(SCRIPT), "train.py", "--epochs", "3"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "TORCHRUN": str(fake), "GPUS_PER_NODE": "4",
                               "PYTHON": sys.executable, "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "job.pid"), **env})


def test_a_child_node_joins_the_main_nodes_address(tmp_path):
    result = run({"AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_NUM_NODES": "2",
                  "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.5"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--nnodes=2", "--node_rank=1", "--nproc_per_node=4", "--master_addr=10.0.1.5",
                                     "--master_port=29500", "train.py", "--epochs", "3"]


def test_the_main_node_uses_its_own_address(tmp_path):
    result = run({"AWS_BATCH_JOB_NODE_INDEX": "0", "AWS_BATCH_JOB_NUM_NODES": "2"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--node_rank=0" in result.stdout and "--master_addr=" in result.stdout
    assert "--master_addr= " not in result.stdout + " "


def test_outside_a_multi_node_job_it_says_so(tmp_path):
    result = run({}, tmp_path)
    assert result.returncode != 0 and "not a multi-node parallel job" in result.stderr


def test_an_elastic_job_resized_to_one_node_runs_standalone_on_the_single_node_queue(tmp_path):
    """No AWS_BATCH_JOB_NODE_INDEX / AWS_BATCH_JOB_NUM_NODES (not a multi-node parallel job) but an elastic range:
    one node, rendezvous on the loopback, no main node address to look up."""
    result = run({"ML_PLATFORM_ELASTIC": "1:8"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--nnodes=1", "--node_rank=0", "--standalone", "--nproc_per_node=4", "train.py",
                                     "--epochs", "3"]


def test_an_elastic_job_on_the_multi_node_queue_keeps_the_static_rendezvous(tmp_path):
    result = run({"ML_PLATFORM_ELASTIC": "1:8", "AWS_BATCH_JOB_NODE_INDEX": "1", "AWS_BATCH_JOB_NUM_NODES": "2",
                  "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "10.0.1.5"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--nnodes=2" in result.stdout and "--master_addr=10.0.1.5" in result.stdout
    assert "--standalone" not in result.stdout


def test_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
