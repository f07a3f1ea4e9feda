"""SageMaker data capture records as SageMaker writes them, and the hourly prefixes they sit under (standard
library only).

A record is one JSON object per line under ``<prefix><endpoint>/<variant>/yyyy/mm/dd/hh/``:
``captureData.endpointInput`` and ``captureData.endpointOutput`` each hold ``{observedContentType, mode, data,
encoding}``, with ``encoding`` CSV or JSON (the body as text: a JSON body is a string inside ``data``) or BASE64
(content types not listed in the endpoint's ``CaptureContentTypeHeader``); ``eventMetadata`` holds ``eventId``,
``inferenceTime`` and ``inferenceId`` when the caller passed ``InferenceId`` to InvokeEndpoint.
https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-data-capture-endpoint.html
"""

from __future__ import annotations

import base64
import csv
import io
import json
from datetime import datetime, timedelta
from typing import Any


def decode_body(data: Any, encoding: str, content_type: str = "") -> tuple[str, Any]:
    """``("json", value)`` or ``("csv", rows)`` for a captured body. BASE64 bodies are read by their content type
    (JSON, JSON Lines, or CSV and plain text); another content type raises ValueError."""
    encoding = (encoding or "CSV").upper()
    kind = content_type.lower()
    if encoding == "BASE64":
        data = base64.b64decode(data, validate=True).decode("utf-8")
        if "jsonlines" in kind or "x-ndjson" in kind:
            return "json", [json.loads(line) for line in data.splitlines() if line.strip()]
        if "json" in kind:
            return "json", json.loads(data)
        if not ("csv" in kind or "text/plain" in kind or not kind):
            raise ValueError(f"a BASE64 body of content type {content_type!r} is neither JSON nor CSV")
        encoding = "CSV"
    if encoding == "JSON":
        # SageMaker writes the JSON body as a string inside data; an already parsed value is accepted too.
        return "json", json.loads(data) if isinstance(data, str) else data
    if encoding != "CSV":
        raise ValueError(f"unknown capture encoding {encoding!r} (CSV, JSON or BASE64)")
    if not isinstance(data, str):
        raise ValueError("a CSV body is not text")
    return "csv", [row for row in csv.reader(io.StringIO(data)) if row]


def event_keys(record: dict) -> tuple[str, str]:
    """``(inferenceId, eventId)`` of a captured record (empty strings where absent)."""
    metadata = record.get("eventMetadata") or {}
    return str(metadata.get("inferenceId") or ""), str(metadata.get("eventId") or "")


def hour_prefixes(prefix: str, first: datetime, last: datetime) -> list[str]:
    """The ``<prefix>yyyy/mm/dd/hh/`` prefixes of the hours from ``last`` back to ``first`` (both included)."""
    hour = last.replace(minute=0, second=0, microsecond=0)
    prefixes = []
    while hour >= first.replace(minute=0, second=0, microsecond=0):
        prefixes.append(f"{prefix}{hour:%Y/%m/%d/%H}/")
        hour -= timedelta(hours=1)
    return prefixes
