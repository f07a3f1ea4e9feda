"""Held-out data: a deterministic split that keeps 5% of the samples out of training (standard library only).

    from ml_platform_job.holdout import split

    train, holdout = split(samples, key=lambda s: s["id"])      # 95% / 5%, the same on every machine and attempt
    train, holdout = split(rows, key=lambda r: r["id"], group=lambda r: r["user_id"])  # a user's rows on one side
    ...
    run.log_holdout(accuracy=evaluate(model, holdout))          # logged as holdout_accuracy

A sample's side is decided by a SHA-256 of its id (and an optional salt), never by its position or a random
generator: a resumed attempt, a retraining job months later on a grown dataset, and the job that trained the live
model all hold out the same samples, so their held-out scores compare (the promotion gate compares them). Keep the
salt fixed for a model family; change it only to draw a new held-out set on purpose.

The key is required and must be a sample's stable id, never the sample itself: a sample's side must not move when
a column is added or a value is cleaned. Duplicates (the same example twice, or augmented copies) must share an id,
or one copy trains while the other is held out. ``group`` keeps every sample of a group (a user, a patient, a
document) on one side, as scikit-learn's GroupShuffleSplit does: the side is then decided by the group's id, and
rows of one user never judge a model that trained on the same user's other rows.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable, Optional, TypeVar, Union

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


def split(samples: Iterable[T], key: Callable[[T], SampleId], *, fraction: float = HOLDOUT_FRACTION, salt: str = "",
          group: Optional[Callable[[T], SampleId]] = None) -> tuple[list[T], list[T]]:
    """(train, holdout): a sample goes to holdout when ``is_holdout`` of its group's id (with ``group``) or of its
    own id (``key``, required: the sample's stable id) holds, for ``fraction`` and ``salt``."""
    if not callable(key):
        raise TypeError(f"key={key!r}: a function from a sample to its stable id, e.g. key=lambda row: row['id']")
    side = group or key
    train: list[T] = []
    holdout: list[T] = []
    for sample in samples:
        (holdout if is_holdout(side(sample), fraction, salt) else train).append(sample)
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
