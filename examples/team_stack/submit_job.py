"""The team's own tooling: submits a training job to the training stack's queue with the library alone (boto3, no
CDK), as `python -m ml_platform_constructs job submit training ...` does: the same checks, and the job contract's
ML_PLATFORM_CHECKPOINT_URI (under the queue's checkpoint prefix, per job name) and ML_PLATFORM_JOB_NAME.

  python submit_job.py resnet50-run1 111122223333.dkr.ecr.eu-west-1.amazonaws.com/resnet:1 python train.py --epochs 90
"""

import sys

import boto3
from ml_platform_constructs.operations.jobs import submit_job

name, image, *command = sys.argv[1:]
batch = boto3.client("batch", region_name="eu-west-1")
# "training" is the queue's TrainingQueue.queue_name (the stack's TrainingQueueName output). The same name again
# resumes from that job's checkpoints; a new name starts fresh.
job = submit_job(batch, queue="training", name=name, image=image, command=command)
print(f"{job['job_name']}: job id {job['job_id']}, checkpoints under {job['checkpoint_uri']}")
