"""The benchmark's timing, record and publishing on CPU with a tiny pure-Python model; the advisor reads it back."""

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import boto3
import pytest
from moto import mock_aws

from ml_platform_constructs.advice.advisor import PRESETS, advise
from ml_platform_job import benchmark
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices
from ops.advise import load_measured


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_warmup_is_not_timed_and_sync_brackets_the_timing():
    clock, events = FakeClock(), []

    def step():
        events.append("step")
        clock.now += 0.5

    def sync():
        events.append("sync")

    result = benchmark.measure(step, 32, warmup_steps=3, min_seconds=4.9, sync=sync, clock=clock)
    # 3 untimed warm-up steps (1.5 s), then steps until 5 s have passed, checked every 5 steps: 10 steps
    assert events[:4] == ["step", "step", "step", "sync"] and events[-1] == "sync"
    assert result.steps == 10 and result.seconds == 5.0 and result.samples == 320
    assert result.samples_per_second == 64


def test_max_steps_bounds_a_slow_clock():
    result = benchmark.measure(lambda: None, 1, warmup_steps=0, min_seconds=3600, max_steps=7, clock=FakeClock())
    assert result.steps == 7


def test_bad_arguments_fail():
    with pytest.raises(ValueError, match="samples_per_step and min_seconds must be above 0"):
        benchmark.measure(lambda: None, 0)


def tiny_model_step():
    """One SGD step of a 16-weight linear model on a batch of 64, in pure Python."""
    weights = [0.0] * 16
    batch = [([((i * 7 + j) % 13) / 13 for j in range(16)], (i % 5) / 5) for i in range(64)]

    def step():
        gradient = [0.0] * 16
        for features, target in batch:
            error = sum(w * x for w, x in zip(weights, features)) - target
            for j, x in enumerate(features):
                gradient[j] += error * x / len(batch)
        for j in range(16):
            weights[j] -= 0.1 * gradient[j]
    return step, weights


def test_tiny_model_measured_published_and_preferred_by_the_advisor():
    step, weights = tiny_model_step()
    measurement = benchmark.measure(step, 64, warmup_steps=2, min_seconds=0.05)
    assert measurement.samples_per_second > 0 and any(weights)  # it trained
    record = benchmark.benchmark_record(instance_type="g6.xlarge", gpu_model="NVIDIA L4", workload="bert-large-finetune",
                                        gpus=1, measurement=measurement, framework="pure python",
                                        now=datetime(2026, 11, 30, 9, 30, tzinfo=timezone.utc))
    assert record["samples_per_second_per_gpu"] == pytest.approx(measurement.samples_per_second)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        s3.create_bucket(Bucket="data")
        key = benchmark.publish(record, s3=s3, cloudwatch=cloudwatch, bucket="data")
        assert key == "benchmarks/bert-large-finetune/g6.xlarge/2026-11-30T09:30:00Z.json"
        metrics = cloudwatch.list_metrics(Namespace="MLPlatform/Benchmark")["Metrics"]
        assert metrics[0]["MetricName"] == "TrainingThroughputPerGpu"
        assert {d["Name"]: d["Value"] for d in metrics[0]["Dimensions"]} == {
            "InstanceType": "g6.xlarge", "Workload": "bert-large-finetune"}
        s3.put_object(Bucket="data", Key="benchmarks/README.txt", Body=b"not a record")
        measured = load_measured(s3, "data")
    assert len(measured) == 1 and measured[0].samples_per_second_per_gpu == pytest.approx(measurement.samples_per_second)
    result = advise(PRESETS["bert-large-finetune"], prices=load_prices("us-east-1"), measured=measured)
    option = next(o for o in result.options if o.instance_type == "g6.xlarge" and o.instances == 1)
    assert option.throughput_source == "measured"
    assert option.samples_per_second == pytest.approx(measurement.samples_per_second)
    assert json.loads(json.dumps(record))["measured_at"] == "2026-11-30T09:30:00Z"


class FakeImds(BaseHTTPRequestHandler):
    def do_PUT(self):  # noqa: N802
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._reply(b"token-1")
        else:
            self.send_error(400)

    def do_GET(self):  # noqa: N802
        if self.path == "/latest/meta-data/instance-type" and self.headers.get("X-aws-ec2-metadata-token") == "token-1":
            self._reply(b"g6e.xlarge")
        else:
            self.send_error(401)

    def _reply(self, body):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_instance_type_from_imdsv2():
    server = HTTPServer(("127.0.0.1", 0), FakeImds)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        assert benchmark.instance_type_from_metadata(f"http://127.0.0.1:{server.server_port}") == "g6e.xlarge"
    finally:
        server.shutdown()
    assert benchmark.instance_type_from_metadata("http://127.0.0.1:9", timeout=0.2) is None


def test_a_queue_job_reads_the_instance_type_the_boot_wrote_before_asking_the_metadata_service(tmp_path):
    written = tmp_path / "instance-type"
    written.write_text("g6.xlarge\n")
    assert benchmark.local_instance_type(str(written), base_url="http://127.0.0.1:9") == "g6.xlarge"
