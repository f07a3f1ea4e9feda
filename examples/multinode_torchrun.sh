#!/usr/bin/env bash
# A multi-node training job on a TrainingQueue's multi-node queue (AWS Batch multi-node parallel):
#   ./platform job submit ENV QUEUE --nodes 2 --image IMAGE -- bash /opt/ml/code/multinode_torchrun.sh train.py ARGS...
# An elastic job works too (ML_PLATFORM_ELASTIC=MIN:MAX in its environment; docs: job/ml_platform_job/elastic.py):
#   ./platform job submit ENV QUEUE --nodes 1:8 --image IMAGE -- bash /opt/ml/code/multinode_torchrun.sh train.py ...
# Batch starts the main node first, then the others, and gives each node (from 0):
#   AWS_BATCH_JOB_NODE_INDEX, AWS_BATCH_JOB_NUM_NODES, AWS_BATCH_JOB_MAIN_NODE_INDEX, and on the other nodes only
#   AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS (https://docs.aws.amazon.com/batch/latest/userguide/mnp-env-vars.html).
# torchrun's static rendezvous: every node points at the main node's address, the main node at its own.
# An elastic job resized to 1 node runs on the queue's single-node queue, as a plain job (none of those variables):
# then torchrun runs this node alone (--nnodes=1 --node_rank=0 --standalone: its rendezvous on the loopback,
# 127.0.0.1, at a free port). A resize exits 86 either way (the launcher keeps it; the controller resubmits).
set -euo pipefail
single_node=
if [ -z "${AWS_BATCH_JOB_NODE_INDEX:-}" ] && [ -n "${ML_PLATFORM_ELASTIC:-}" ]; then
  single_node=1  # an elastic job at 1 node, on the single-node queue
else
  : "${AWS_BATCH_JOB_NODE_INDEX:?not a multi-node parallel job: submit with --nodes N (or --nodes MIN:MAX, elastic)}" \
    "${AWS_BATCH_JOB_NUM_NODES:?}"
fi
gpus_per_node="${GPUS_PER_NODE:-$(nvidia-smi --list-gpus | wc -l)}"
# NCCL over EFA (libfabric's provider) where the queue attaches one (multi_node_efa=True passes the device in at
# /dev/infiniband/uverbs0); otherwise over the VPC network.
if [ -e /dev/infiniband/uverbs0 ]; then
  export FI_PROVIDER="${FI_PROVIDER:-efa}" FI_EFA_USE_DEVICE_RDMA="${FI_EFA_USE_DEVICE_RDMA:-1}"
fi
# The job side's launcher in front of torchrun (docs/BRING_YOUR_SCRIPT.md, "Stopping in time"): it passes ECS's SIGTERM
# on, gives torchrun the queue's stop timeout and exits 143 when stopped (torchrun alone exits 1: never retried), 86
# when the job asked to be resized.
if [ -n "$single_node" ]; then
  exec "${PYTHON:-python3}" -m ml_platform_job launch -- "${TORCHRUN:-torchrun}" --nnodes=1 --node_rank=0 \
    --standalone --nproc_per_node="$gpus_per_node" "$@"
fi
main_address="${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-$(hostname -i | awk '{print $1}')}"
exec "${PYTHON:-python3}" -m ml_platform_job launch -- "${TORCHRUN:-torchrun}" --nnodes="$AWS_BATCH_JOB_NUM_NODES" \
  --node_rank="$AWS_BATCH_JOB_NODE_INDEX" --nproc_per_node="$gpus_per_node" --master_addr="$main_address" \
  --master_port="${MASTER_PORT:-29500}" "$@"
