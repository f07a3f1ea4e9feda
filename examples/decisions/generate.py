"""Writes the sample inputs of the local decision commands (run from the repository root; seeded, so the files
it writes are always the same):

  ./platform model judge examples/decisions/judge/candidate.jsonl examples/decisions/judge/live.jsonl
  ./platform drift-baseline dev classifier examples/decisions/train_sample.csv --exclude label --output /tmp/b.json
  ./platform drift check dev classifier --baseline examples/decisions/baseline.json \
      --capture examples/decisions/capture/steady            (or capture/shifted: one feature moved)
  ./platform quality check dev classifier --capture examples/decisions/capture/steady \
      --labels examples/decisions/labels.jsonl

The captures are SageMaker data capture files as an endpoint with a CSV model (the dev environment's classifier:
four features in, the probability of class 1 out) writes them, one hour each, under
``<endpoint>/<variant>/yyyy/mm/dd/hh/``: https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-data-capture-endpoint.html
The labels are the ground truth of the steady hour, as ``./platform labels upload`` takes them.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
FEATURES = 4
TRAIN_ROWS = 2000
CAPTURED = 600
HOLDOUT = 3000


def features(rng: random.Random, shift: float = 0.0) -> list[float]:
    return [round(rng.gauss(0, 1) + (shift if i == 2 else 0.0), 4) for i in range(FEATURES)]


def probability(x: list[float]) -> float:
    return 1 / (1 + math.exp(-(1.2 * x[0] - 0.8 * x[1] + 0.5 * x[2])))


def label(rng: random.Random, x: list[float]) -> int:
    """The model's call, wrong for 8% of requests: the held-out accuracy the dev endpoint's baseline (0.92) says."""
    return int(probability(x) > 0.5) ^ int(rng.random() < 0.08)


def capture(rng: random.Random, directory: Path, hour: str, shift: float) -> list[tuple[str, int]]:
    """One hour of captured requests; returns (inference id, true label) of each."""
    path = directory / "classifier" / "AllTraffic" / hour.replace("-", "/").replace("T", "/") / "capture.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    truth, lines = [], []
    for i in range(CAPTURED):
        x = features(rng, shift)
        inference_id = f"{directory.name}-{i:04d}"
        minute, second = divmod(i * 6, 60)
        lines.append(json.dumps({
            "captureData": {
                "endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                                  "data": ",".join(str(v) for v in x), "encoding": "CSV"},
                "endpointOutput": {"observedContentType": "text/csv; charset=utf-8", "mode": "OUTPUT",
                                   "data": f"{probability(x):.4f}", "encoding": "CSV"}},
            "eventMetadata": {"eventId": f"00000000-0000-4000-8000-{i:012d}", "inferenceId": inference_id,
                              "inferenceTime": f"{hour}:{minute % 60:02d}:{second:02d}Z"},
            "eventVersion": "0"}, separators=(",", ":")))
        truth.append((inference_id, label(rng, x)))
    path.write_text("\n".join(lines) + "\n")
    return truth


def main(out: Path = HERE) -> None:
    """Writes every sample under ``out`` (baseline.json is ./platform drift-baseline's output for train_sample.csv)."""
    rng = random.Random(37)
    rows = ["label," + ",".join(f"f{i}" for i in range(FEATURES))]
    for _ in range(TRAIN_ROWS):
        x = features(rng)
        rows.append(f"{label(rng, x)}," + ",".join(str(v) for v in x))
    (out / "train_sample.csv").write_text("\n".join(rows) + "\n")
    truth = capture(rng, out / "capture" / "steady", "2026-12-01T10", 0.0)
    capture(rng, out / "capture" / "shifted", "2026-12-01T11", 0.8)
    (out / "labels.jsonl").write_text("".join(json.dumps({"inferenceId": i, "label": y}) + "\n" for i, y in truth))
    judge = out / "judge"
    judge.mkdir(parents=True, exist_ok=True)
    live_accuracy, candidate_accuracy = 0.90, 0.915
    for name, accuracy in (("live", live_accuracy), ("candidate", candidate_accuracy)):
        outcomes = random.Random(f"{name}-37")
        judge.joinpath(f"{name}.jsonl").write_text("".join(
            json.dumps({"id": f"holdout-{i:05d}", "correct": outcomes.random() < accuracy}) + "\n"
            for i in range(HOLDOUT)))


if __name__ == "__main__":
    main()
