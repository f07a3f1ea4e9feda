"""The drift check's and the GPU benchmark's arithmetic and records where mutation testing found them unchecked:
The Jacobi eigen-decomposition's values, vectors and order, categorical bins of numbers,
the benchmark's record fields (what the advisor reads), its metric's unit and its argument checks."""

import json
import math
from datetime import datetime, timezone

import pytest

from ml_platform_constructs.runtime.decisions import drift
from ml_platform_job import benchmark


def test_eigen_values_largest_first_with_their_unit_vectors():
    values, vectors = drift.symmetric_eigen([[2.0, 1.0], [1.0, 2.0]])
    assert values == pytest.approx([3.0, 1.0])
    assert [abs(x) for x in vectors[0]] == pytest.approx([1 / math.sqrt(2)] * 2)
    assert vectors[1][0] == pytest.approx(-vectors[1][1])  # (1, -1)/sqrt(2), up to its sign
    values, vectors = drift.symmetric_eigen([[1.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 3.0]])
    assert values == [5.0, 3.0, 1.0] and [[abs(x) for x in v] for v in vectors] == [[0, 1, 0], [0, 0, 1], [1, 0, 0]]
    matrix = [[4.0, 1.0, 2.0], [1.0, 3.0, 0.5], [2.0, 0.5, 5.0]]
    values, vectors = drift.symmetric_eigen(matrix)
    for value, vector in zip(values, vectors):  # A v = lambda v, for each pair
        product = [sum(matrix[i][j] * vector[j] for j in range(3)) for i in range(3)]
        assert product == pytest.approx([value * x for x in vector], abs=1e-9)
    assert values == sorted(values, reverse=True) and sum(values) == pytest.approx(12.0)


def test_a_number_in_a_categorical_feature_is_its_category():
    baseline = {"feature_order": ["c"], "features": {"c": {"type": "categorical", "categories": ["1", "2", "red"],
                                                           "counts": [1, 1, 1, 0]}}}
    window = drift.Window(baseline)
    for value in (2, "red", "blue"):
        window.add_row({"c": value})
    assert window.counts["c"] == [0, 1, 1, 1] and window.other_category_values == 1


def test_quantiles_interpolate_and_the_noise_table_scales_beyond_its_sizes():
    assert drift.quantile([1.0, 2.0, 3.0, 4.0], 0.25) == 1.75 and drift.quantile([5.0], 0.9) == 5.0
    table = {"50": 0.2, "200": 0.1}
    assert drift.noise_at(table, 49) is None and drift.noise_at(table, 50) == 0.2
    assert drift.noise_at(table, 100) == pytest.approx(0.2 * (0.1 / 0.2) ** 0.5)
    assert drift.noise_at(table, 800) == pytest.approx(0.05)


def test_too_few_bins_are_refused_saying_how_many():
    with pytest.raises(ValueError, match="^bins=1: at least 2 bins are needed$"):
        drift.build_baseline([{"a": 1}], ["a"], bins=1)


MEASURED = benchmark.Measurement(steps=50, seconds=10.0, samples=6400.0)


def test_the_benchmark_record_has_the_fields_the_advisor_reads():
    record = benchmark.benchmark_record(instance_type="g5.xlarge", gpu_model="A10G", workload="resnet50", gpus=2,
                                        measurement=MEASURED, framework="torch 2.5",
                                        now=datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc))
    assert record == {"instance_type": "g5.xlarge", "gpu_model": "A10G", "workload": "resnet50", "gpus": 2,
                      "samples_per_second_per_gpu": 320.0, "samples_per_second": 640.0, "steps": 50, "seconds": 10.0,
                      "framework": "torch 2.5", "measured_at": "2026-11-29T20:00:00Z"}
    detailed = benchmark.benchmark_record(instance_type="g5.xlarge", gpu_model="A10G", workload="resnet50", gpus=1,
                                          measurement=MEASURED, framework="torch", details={"amp": True})
    assert detailed["details"] == {"amp": True}


def test_the_benchmark_is_published_as_json_and_a_per_second_metric():
    record = benchmark.benchmark_record(instance_type="g5.xlarge", gpu_model="A10G", workload="resnet50", gpus=1,
                                        measurement=MEASURED, framework="torch",
                                        now=datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc))
    put, metrics = [], []
    s3 = type("S3", (), {"put_object": lambda self, **kwargs: put.append(kwargs)})()
    cloudwatch = type("Cw", (), {"put_metric_data": lambda self, **kwargs: metrics.append(kwargs)})()
    key = benchmark.publish(record, s3=s3, cloudwatch=cloudwatch, bucket="datasets")
    assert put[0]["ContentType"] == "application/json" and put[0]["Key"] == key
    assert put[0]["Body"] == json.dumps(record, indent=1).encode()
    (datum,) = metrics[0]["MetricData"]
    assert (datum["MetricName"], datum["Value"], datum["Unit"]) == ("TrainingThroughputPerGpu", 640.0, "Count/Second")


@pytest.mark.parametrize("kwargs", [{"samples_per_step": 0}, {"warmup_steps": -1}, {"min_seconds": 0},
                                    {"max_steps": 0}])
def test_a_measurement_that_cannot_measure_is_refused(kwargs):
    with pytest.raises(ValueError, match="max_steps at least 1"):
        benchmark.measure(lambda: None, **{"samples_per_step": 8, **kwargs})


def test_one_step_is_a_measurement():
    ticks = iter(range(100))
    measured = benchmark.measure(lambda: None, 8, warmup_steps=0, min_seconds=1, max_steps=1,
                                 clock=lambda: float(next(ticks)))
    assert (measured.steps, measured.samples) == (1, 8.0)
