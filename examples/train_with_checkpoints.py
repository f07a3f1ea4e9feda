#!/usr/bin/env python3
"""A minimal training loop that follows the SpotGpuFleet job contract (see README, "The job contract").

1. Write its PID to $ML_PLATFORM_JOB_PID_FILE first thing (before loading data): the interruption watcher
   signals that process, and reports the fleet busy while it lives, so scale-to-zero never stops it.
2. Resume: load the newest checkpoint under $ML_PLATFORM_CHECKPOINT_URI, if any.
3. Stop: on SIGTERM, or when $ML_PLATFORM_STOP_FILE exists, write a checkpoint and exit 0 within 90 s
   (a Spot interruption gives 2 minutes in all).
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


class Job:
    def __init__(self, env: dict[str, str], s3=None) -> None:
        uri = urlparse(env["ML_PLATFORM_CHECKPOINT_URI"])
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


def run(job: Job, total_steps: int, checkpoint_every: int) -> dict:
    state = job.resume()
    while state["step"] < total_steps:
        if job.should_stop():
            job.save(state)
            return state
        state = train_step(state)
        if state["step"] % checkpoint_every == 0:
            job.save(state)
    job.save(state)
    return state


if __name__ == "__main__":
    training = Job(dict(os.environ))
    training.install()
    final = run(training, total_steps=int(sys.argv[1]) if len(sys.argv) > 1 else 1000, checkpoint_every=100)
    print(f"stopped at step {final['step']}")
