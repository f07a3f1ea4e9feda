#!/usr/bin/env python3
"""Calls a SageMaker endpoint once per CSV row with an InferenceId, so that the row's ground truth can be joined with
its prediction later (the endpoint's quality check joins labels on the captured record's inferenceId).

  python examples/invoke_endpoint.py ENDPOINT_NAME requests.csv --id-column order_id [--region us-east-1]

requests.csv has a header; the --id-column value of each row (a business key the label will carry later, such as an
order id) is passed as InferenceId and left out of the request, the other columns are the request, in order. Each
prediction is printed as a JSON line, {"inferenceId": ..., "prediction": ...}. When the truth is known, write
{"inferenceId": "<the same id>", "label": ...} lines and upload them: ./platform labels upload ENV ENDPOINT FILE.
Needs boto3 and credentials allowed sagemaker:InvokeEndpoint.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any, Iterable, Iterator

MAX_INFERENCE_ID = 64  # InvokeEndpoint's InferenceId: 1-64 printable characters


def request_body(values: Iterable[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(list(values))
    return buffer.getvalue()


def invoke(runtime: Any, endpoint: str, rows: Iterable[dict], id_column: str) -> Iterator[dict]:
    for row in rows:
        inference_id = str(row.pop(id_column, "") or "").strip()
        if not 0 < len(inference_id) <= MAX_INFERENCE_ID:
            raise SystemExit(f"error: a row's {id_column} {inference_id!r} is not an InferenceId (1-64 characters)")
        response = runtime.invoke_endpoint(EndpointName=endpoint, ContentType="text/csv", Accept="text/csv",
                                           Body=request_body(row.values()), InferenceId=inference_id)
        yield {"inferenceId": inference_id, "prediction": response["Body"].read().decode("utf-8").strip()}


def main(argv: list[str], runtime: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("endpoint")
    parser.add_argument("requests")
    parser.add_argument("--id-column", required=True)
    parser.add_argument("--region")
    args = parser.parse_args(argv)
    if runtime is None:
        import boto3

        runtime = boto3.client("sagemaker-runtime", region_name=args.region)
    with open(args.requests, newline="") as handle:
        reader = csv.DictReader(handle)
        if args.id_column not in (reader.fieldnames or []):
            raise SystemExit(f"error: {args.requests} has no column {args.id_column!r} (columns: {reader.fieldnames})")
        for prediction in invoke(runtime, args.endpoint, reader, args.id_column):
            print(json.dumps(prediction))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
