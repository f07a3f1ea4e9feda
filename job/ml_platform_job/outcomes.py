"""A model's per-example held-out outcomes: the promotion gate's evidence, as an evaluation job writes it and
``./platform model promote`` reads it (standard library only).

JSON Lines, one held-out example a line: ``{"id": ..., "correct": true}`` (classifiers) or ``{"id": ..., "error": 0.3}``
(regressors, the absolute error). The gate that judges them is ``ml_platform_constructs.runtime.decisions.promotion``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional


class EvidenceError(ValueError):
    """An outcomes file that cannot be evidence: says the line and what to fix."""


@dataclass(frozen=True)
class Outcomes:
    """A model's per-example held-out outcomes: ``kind`` "correct" (values 1.0 or 0.0) or "error" (absolute errors)."""
    kind: str
    values: Mapping[str, float]

    @property
    def metric(self) -> str:
        return "accuracy" if self.kind == "correct" else "mae"

    def digest(self, ids: Optional[Iterable[str]] = None) -> str:
        """SHA-256 of the sorted ids: two outcome sets with the same digest were judged on the same examples."""
        sha = hashlib.sha256()
        for sample_id in sorted(self.values if ids is None else ids):
            sha.update(sample_id.encode() + b"\n")
        return sha.hexdigest()

    def score(self, ids: Optional[Iterable[str]] = None) -> float:
        chosen = [self.values[i] for i in (self.values if ids is None else ids)]
        return math.fsum(chosen) / len(chosen)


def read_outcomes(lines: Iterable[str], source: str = "outcomes") -> Outcomes:
    """Per-example outcomes from JSON Lines (``{"id": ..., "correct": bool}`` or ``{"id": ..., "error": x}``);
    every id once, every line of one kind."""
    values: dict[str, float] = {}
    kind = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise EvidenceError(f"{where}: not JSON; each line is {{\"id\": ..., \"correct\": true}} or "
                                f"{{\"id\": ..., \"error\": 0.3}}") from None
        if not isinstance(record, dict) or "id" not in record or record["id"] in (None, ""):
            raise EvidenceError(f"{where}: no \"id\" (the held-out example's id, as the split keys it)")
        line_kind = "correct" if "correct" in record else "error" if "error" in record else None
        if line_kind is None:
            raise EvidenceError(f"{where}: neither \"correct\" (classifiers) nor \"error\" (regressors)")
        if kind is not None and line_kind != kind:
            raise EvidenceError(f"{where}: \"{line_kind}\" after \"{kind}\" lines: one kind per file")
        kind = line_kind
        value = record[line_kind]
        if line_kind == "correct":
            if not isinstance(value, bool):
                raise EvidenceError(f"{where}: \"correct\" is {value!r}, not true or false")
            number_value = 1.0 if value else 0.0
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise EvidenceError(f"{where}: \"error\" is {value!r}, not a finite number of at least 0")
            number_value = float(value)
        sample_id = str(record["id"])
        if sample_id in values:
            raise EvidenceError(f"{where}: id {sample_id!r} again; each held-out example once")
        values[sample_id] = number_value
    if kind is None:
        raise EvidenceError(f"{source}: no outcomes")
    return Outcomes(kind, values)


def write_outcomes(outcomes: Mapping[str, Any], kind: str) -> str:
    """JSON Lines text of per-example outcomes (``{id: bool}`` for "correct", ``{id: error}`` for "error")."""
    if kind not in ("correct", "error"):
        raise ValueError(f"kind={kind!r}: 'correct' or 'error'")
    return "".join(json.dumps({"id": str(i), kind: bool(v) if kind == "correct" else float(v)}) + "\n"
                   for i, v in sorted(outcomes.items(), key=lambda item: str(item[0])))
