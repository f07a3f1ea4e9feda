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
import binascii
import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Optional


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
    """``(inferenceId, eventId)`` of a captured record (empty strings where absent). A line that is no JSON object
    raises TypeError, which the checks count as a malformed record (a JSON list or number here used to end the
    quality check in an AttributeError)."""
    if not isinstance(record, dict):
        raise TypeError(f"a capture record is a JSON object, not a JSON {json_type(record)}")
    metadata = record.get("eventMetadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return str(metadata.get("inferenceId") or ""), str(metadata.get("eventId") or "")


def json_type(value: Any) -> str:
    """What JSON calls a parsed value's type: object, array, string, number, boolean or null."""
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def hour_prefixes(prefix: str, first: datetime, last: datetime) -> list[str]:
    """The ``<prefix>yyyy/mm/dd/hh/`` prefixes of the hours from ``last`` back to ``first`` (both included)."""
    hour = last.replace(minute=0, second=0, microsecond=0)
    prefixes = []
    while hour >= first.replace(minute=0, second=0, microsecond=0):
        prefixes.append(f"{prefix}{hour:%Y/%m/%d/%H}/")
        hour -= timedelta(hours=1)
    return prefixes


# --- what a check could not use ------------------------------------------------------------------------------------

def record_problem(line: str, read: Callable[[dict], Any]) -> Optional[str]:
    """Why one line of a capture file is no record a check can use, or None. ``read`` takes from the record what the
    check takes (the drift check its request's rows, the quality check its key and predictions) and raises on what
    it cannot use, as the check does; its error is the reason."""
    try:
        record = json.loads(line)
    except ValueError as error:
        return f"not JSON ({getattr(error, 'msg', error)})"
    if not isinstance(record, dict):
        return f"a JSON {json_type(record)}, not a capture record"
    try:
        read(record)
    except KeyError as error:
        return f"no {error.args[0]!r} in it (not SageMaker's data capture)"
    except (TypeError, IndexError, AttributeError) as error:
        return f"not SageMaker's data capture ({type(error).__name__}: {error})"
    except json.JSONDecodeError as error:
        return f"its body is not the JSON its encoding says ({error.msg})"
    except UnicodeDecodeError:
        return "its BASE64 body is not UTF-8 text"
    except binascii.Error as error:
        return f"its BASE64 body is not BASE64 ({error})"
    except ValueError as error:  # an encoding it does not know, or a body that is not what the check expects
        return " ".join(str(error).split()) or type(error).__name__
    return None


@dataclass
class Unusable:
    """The records a check could not use, by reason: how many of each and where the first was (``file:line``)."""
    reasons: dict = field(default_factory=dict)  # reason -> [count, first place]

    def add(self, reason: str, where: str) -> None:
        entry = self.reasons.setdefault(reason, [0, where])
        entry[0] += 1

    @property
    def count(self) -> int:
        return sum(entry[0] for entry in self.reasons.values())

    def ranked(self) -> list:
        return sorted(self.reasons.items(), key=lambda item: -item[1][0])

    def to_json(self) -> dict:
        return {"count": self.count, "reasons": [{"reason": reason, "records": count, "first": first}
                                                 for reason, (count, first) in self.ranked()]}

    def summary(self, shown: int = 3) -> str:
        """``12 records unusable: 10 <reason> (first: a.jsonl:3); 2 <reason> (first: b.jsonl:1)``."""
        ranked = self.ranked()
        parts = [f"{count} {reason} (first: {first})" for reason, (count, first) in ranked[:shown]]
        if len(ranked) > shown:
            parts.append(f"{sum(count for _, (count, _) in ranked[shown:])} for {len(ranked) - shown} other reason(s)")
        return f"{self.count} record(s) unusable: " + "; ".join(parts)
