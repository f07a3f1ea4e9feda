"""Held-out data: a deterministic split that keeps 5% of the samples out of training (standard library only).

    from ml_platform_constructs.runtime.holdout import split

    train, holdout = split(samples, key=lambda s: s["id"])      # 95% / 5%, the same on every machine and attempt
    ...
    run.log_holdout(accuracy=evaluate(model, holdout))          # logged as holdout_accuracy

A sample's side is decided by a SHA-256 of its id (and an optional salt), never by its position or a random
generator: a resumed attempt, a retraining job months later on a grown dataset, and the job that trained the live
model all hold out the same samples, so their held-out scores compare (the promotion gate compares them). Keep the
salt fixed for a model family; change it only to draw a new held-out set on purpose.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable, TypeVar, Union

HOLDOUT_FRACTION = 0.05
SampleId = Union[str, int, bytes]
T = TypeVar("T")


def holdout_position(sample_id: SampleId, salt: str = "") -> float:
    """Where ``sample_id`` falls in [0, 1): the first 8 bytes of SHA-256(salt:id) over 2**64."""
    raw = sample_id if isinstance(sample_id, bytes) else str(sample_id).encode()
    digest = hashlib.sha256(salt.encode() + b":" + raw).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def is_holdout(sample_id: SampleId, fraction: float = HOLDOUT_FRACTION, salt: str = "") -> bool:
    """True for the ``fraction`` of ids that stay out of training."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction}: a share between 0 and 1 (exclusive), e.g. 0.05 for 5%")
    return holdout_position(sample_id, salt) < fraction


def split(samples: Iterable[T], key: Callable[[T], SampleId] = lambda s: s,  # type: ignore[assignment,return-value]
          fraction: float = HOLDOUT_FRACTION, salt: str = "") -> tuple[list[T], list[T]]:
    """(train, holdout): each sample goes to holdout when ``is_holdout(key(sample), fraction, salt)``."""
    train: list[T] = []
    holdout: list[T] = []
    for sample in samples:
        (holdout if is_holdout(key(sample), fraction, salt) else train).append(sample)
    return train, holdout


def holdout_digest(ids: Iterable[SampleId]) -> str:
    """SHA-256 of the sorted held-out ids: two runs with the same digest were judged on the same samples."""
    digest = hashlib.sha256()
    for sample_id in sorted(str(i) for i in ids):
        digest.update(sample_id.encode() + b"\n")
    return digest.hexdigest()


def describe(ids: Iterable[SampleId], fraction: float = HOLDOUT_FRACTION, salt: str = "") -> dict:
    """The held-out set as a run's passport records it: fraction, salt, size and digest of its ids."""
    ids = list(ids)
    return {"fraction": fraction, "salt": salt, "samples": len(ids), "ids_sha256": holdout_digest(ids)}
