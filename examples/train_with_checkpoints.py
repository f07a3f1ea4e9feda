#!/usr/bin/env python3
"""A minimal training loop that follows the platform's job contract (README, "The job contract"), on a
SpotGpuFleet and on a TrainingQueue (AWS Batch) alike.

1. Write its PID to $ML_PLATFORM_JOB_PID_FILE first thing (before loading data): on a fleet the interruption
   watcher signals that process, and reports the fleet busy while it lives, so scale-to-zero never stops it.
2. Resume: load the newest checkpoint under $ML_PLATFORM_CHECKPOINT_URI, if any (on a queue,
   ``./platform job submit`` sets it to checkpoints/<queue>/<job name>/, the same for every attempt).
3. Stop: on SIGTERM, or when $ML_PLATFORM_STOP_FILE exists, write a checkpoint within 90 s (a Spot interruption
   gives 2 minutes in all) and exit 143 (128 + SIGTERM): the queue retries that attempt, which resumes here.
   Exit 0 only when training is finished: AWS Batch records 0 as SUCCEEDED and never runs the job again.
4. Checkpoint regularly too: an instance can also vanish without notice.

The "model" here is a counter, so the example runs anywhere; replace train_step() and the state dict with
your framework's (torch.save/torch.load into a BytesIO works the same way).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from urllib.parse import urlparse

import boto3


STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: the queue's retry strategy retries it


class Job:
    def __init__(self, env: dict[str, str], s3=None) -> None:
        if "ML_PLATFORM_CHECKPOINT_URI" not in env:
            raise SystemExit("ML_PLATFORM_CHECKPOINT_URI is not set: submit with ./platform job submit (it sets "
                             "checkpoints/<queue>/<job name>/), or set it to an s3:// prefix of your own")
        uri = urlparse(env["ML_PLATFORM_CHECKPOINT_URI"])
        self.attempt = int(env.get("AWS_BATCH_JOB_ATTEMPT", "1"))
        self.bucket, self.prefix = uri.netloc, uri.path.lstrip("/")
        self.stop_file = env.get("ML_PLATFORM_STOP_FILE", "/run/ml-platform/stop-requested")
        self.pid_file = env.get("ML_PLATFORM_JOB_PID_FILE", "/run/ml-platform/job.pid")
        self.s3 = s3 or boto3.client("s3")
        self.stop_signalled = False

    # --- contract ---------------------------------------------------------------------------------------
    def resume(self) -> dict:
        """The newest checkpoint's state, or a fresh one. Keys sort by zero-padded step."""
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix).get("Contents", [])
        checkpoints = sorted(o["Key"] for o in listed if o["Key"].endswith(".json"))
        if not checkpoints:
            return {"step": 0}
        return json.loads(self.s3.get_object(Bucket=self.bucket, Key=checkpoints[-1])["Body"].read())

    def save(self, state: dict) -> str:
        key = f"{self.prefix}step-{state['step']:012d}.json"
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=json.dumps(state).encode())
        return key

    def should_stop(self) -> bool:
        return self.stop_signalled or os.path.exists(self.stop_file)

    def install(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stop_signalled", True))
        os.makedirs(os.path.dirname(self.pid_file), exist_ok=True)
        with open(self.pid_file, "w") as handle:
            handle.write(str(os.getpid()))


def train_step(state: dict) -> dict:
    return {**state, "step": state["step"] + 1}


def run(job: Job, total_steps: int, checkpoint_every: int, step=None) -> dict:
    step = step or train_step
    state = job.resume()
    while state["step"] < total_steps:
        if job.should_stop():
            job.save(state)
            return state
        state = step(state)
        if state["step"] % checkpoint_every == 0:
            job.save(state)
    job.save(state)
    return state


def exit_code(state: dict, total_steps: int) -> int:
    """0 once training is finished; 143 when it stopped early with its checkpoint written."""
    return 0 if state["step"] >= total_steps else STOPPED_EXIT_CODE


if __name__ == "__main__":
    training = Job(dict(os.environ))
    training.install()
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    final = run(training, total_steps=total, checkpoint_every=100)
    print(f"attempt {training.attempt}: stopped at step {final['step']} of {total}")
    sys.exit(exit_code(final, total))
