"""Measures training throughput and publishes it where the advisor finds it (framework-agnostic).

The framework supplies one training step and a way to wait for the device (torch.cuda.synchronize); this module
times steps after a warm-up, builds the record and publishes it:

- a JSON record at benchmarks/<workload>/<instance type>/<UTC time>.json in the environment's dataset bucket
  (`./platform advise PRESET --measured ENV` reads them and prefers them over published numbers);
- a CloudWatch metric MLPlatform/Benchmark TrainingThroughputPerGpu (dimensions InstanceType, Workload), so a
  dashboard shows drift between runs and driver or framework versions.

Used by examples/gpu_benchmark.py (PyTorch).
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Optional

BENCHMARK_PREFIX = "benchmarks/"
BENCHMARK_NAMESPACE = "MLPlatform/Benchmark"
THROUGHPUT_METRIC = "TrainingThroughputPerGpu"
IMDS = "http://169.254.169.254"
# Written by the platform's instance bootstrap at boot; /run/ml-platform is mounted into queue jobs' containers.
INSTANCE_TYPE_FILE = "/run/ml-platform/instance-type"


@dataclass(frozen=True)
class Measurement:
    steps: int
    seconds: float
    samples: float

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds


def measure(step: Callable[[], Any], samples_per_step: float, *, warmup_steps: int = 5, min_seconds: float = 30,
            max_steps: int = 10_000, sync: Callable[[], None] = lambda: None,
            clock: Callable[[], float] = time.perf_counter) -> Measurement:
    """Runs warmup_steps untimed (compilation, allocator, cuDNN autotuning), then steps until min_seconds have
    passed (or max_steps), waiting for the device before reading the clock at both ends: GPU work is
    asynchronous, so a clock read without sync times the launch, not the work."""
    if samples_per_step <= 0 or warmup_steps < 0 or min_seconds <= 0 or max_steps < 1:
        raise ValueError("samples_per_step and min_seconds must be above 0, warmup_steps at least 0, max_steps at least 1")
    for _ in range(warmup_steps):
        step()
    sync()
    start = clock()
    steps = 0
    while True:
        step()
        steps += 1
        if steps >= max_steps or (steps % 5 == 0 and _elapsed(sync, clock, start) >= min_seconds):
            break
    sync()
    return Measurement(steps=steps, seconds=clock() - start, samples=steps * samples_per_step)


def _elapsed(sync: Callable[[], None], clock: Callable[[], float], start: float) -> float:
    sync()
    return clock() - start


def benchmark_record(*, instance_type: str, gpu_model: str, workload: str, gpus: int, measurement: Measurement,
                     framework: str, details: Optional[dict] = None, now: Optional[datetime] = None) -> dict:
    """The record the advisor reads (MeasuredThroughput.from_record): per-GPU throughput and how it was taken."""
    now = now or datetime.now(timezone.utc)
    return {
        "instance_type": instance_type,
        "gpu_model": gpu_model,
        "workload": workload,
        "gpus": gpus,
        "samples_per_second_per_gpu": measurement.samples_per_second / gpus,
        "samples_per_second": measurement.samples_per_second,
        "steps": measurement.steps,
        "seconds": measurement.seconds,
        "framework": framework,
        "measured_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        **({"details": details} if details else {}),
    }


def record_key(record: dict) -> str:
    return f"{BENCHMARK_PREFIX}{record['workload']}/{record['instance_type']}/{record['measured_at']}.json"


def publish(record: dict, *, s3: Any, cloudwatch: Any, bucket: str) -> str:
    """Writes the record to the dataset bucket and the metric to CloudWatch; returns the record's S3 key."""
    key = record_key(record)
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(record, indent=1).encode(), ContentType="application/json")
    cloudwatch.put_metric_data(Namespace=BENCHMARK_NAMESPACE, MetricData=[{
        "MetricName": THROUGHPUT_METRIC,
        "Dimensions": [{"Name": "InstanceType", "Value": record["instance_type"]},
                       {"Name": "Workload", "Value": record["workload"]}],
        "Value": record["samples_per_second_per_gpu"],
        "Unit": "Count/Second",
    }])
    return key


def local_instance_type(path: str = INSTANCE_TYPE_FILE, base_url: str = IMDS) -> Optional[str]:
    """The instance type the platform's boot wrote to ``path`` (mounted into a queue job's container, whatever its
    network mode), else the metadata service's answer, else None."""
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except OSError:
        return instance_type_from_metadata(base_url)


def instance_type_from_metadata(base_url: str = IMDS, timeout: float = 2.0) -> Optional[str]:
    """The EC2 instance type from the instance metadata service (IMDSv2: token first), or None off EC2.
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html"""
    try:
        token_request = urllib.request.Request(f"{base_url}/latest/api/token", method="PUT",
                                               headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        token = urllib.request.urlopen(token_request, timeout=timeout).read().decode()
        request = urllib.request.Request(f"{base_url}/latest/meta-data/instance-type",
                                         headers={"X-aws-ec2-metadata-token": token})
        return urllib.request.urlopen(request, timeout=timeout).read().decode().strip()
    except OSError:
        return None
