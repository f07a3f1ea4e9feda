"""Checkpoints that are complete or absent, under ``ML_PLATFORM_CHECKPOINT_URI`` (``s3://`` or a directory), the newest
K kept (standard library; boto3 for ``s3://``).

Each checkpoint is a folder ``checkpoints/step-<12 digits>/`` of files (one ``state.pt`` for a plain loop; a Hugging
Face ``checkpoint-N`` folder's files; Lightning's ``.ckpt``), and it counts only once its marker ``COMPLETE.json`` is
there, written last, naming every file with its size and SHA-256. So a save cut short by SIGKILL, a half-uploaded
folder or a torn file is never loaded: the newest complete checkpoint is, and a file whose bytes no longer match its
marker makes the store fall back to the one before. Older checkpoints are removed only after a newer one is complete
(never before, unlike Accelerate's rotation), keeping ``keep`` (2 by default: the newest and one to fall back on).
torchtitan marks a step folder complete the same way (``_find_load_step``).

A checkpoint a health rule's stop wrote (its meta names the rule under ``HEALTH_STOP``) holds a state the rule judged
bad (a diverging loss, exploding gradients): it is kept for inspection beside the ``keep`` good ones (never evicting
them) until a newer good checkpoint exists, and it is never resumed from: a job resubmitted with the fix resumes from
the newest good checkpoint before it.

Transformers' just-in-time save on SIGTERM leaves ``checkpoint-is-incomplete.txt`` in a torn folder and leaves
skipping it to the caller: a folder with that file is never uploaded here (``INCOMPLETE_MARKERS``).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from datetime import datetime, timezone
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TypeVar, Union

from .storage import Location

FOLDER = "checkpoints/"
MARKER = "COMPLETE.json"
STEP_FOLDER = re.compile(r"^step-(\d{12})/")
INCOMPLETE_MARKERS = ("checkpoint-is-incomplete.txt",)
DEFAULT_KEEP = 2
HEALTH_STOP = "health_stop"  # the meta key of a health stop's checkpoint: its rule
FORMAT = 1
T = TypeVar("T")


class CorruptCheckpoint(RuntimeError):
    """A checkpoint file whose bytes are not the ones its marker names."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its step, its marker's file list and what the saver recorded with it (``meta``)."""
    step: int
    files: Mapping[str, Mapping[str, Any]]
    meta: Mapping[str, Any]
    saved_at: str

    @property
    def folder(self) -> str:
        return f"{FOLDER}step-{self.step:012d}/"

    @property
    def health_stop(self) -> Optional[str]:
        """The rule whose stop wrote this checkpoint (a state judged bad: never resumed from), or None."""
        rule = self.meta.get(HEALTH_STOP)
        return str(rule) if rule else None


class CheckpointStore:
    """Complete-or-absent checkpoints under a location (see the module docstring)."""

    def __init__(self, location: Union[str, Location], *, keep: int = DEFAULT_KEEP, s3: Any = None) -> None:
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"keep={keep!r}: a whole number of checkpoints of 1 or more (2 keeps one to fall back on)")
        self.location = location if isinstance(location, Location) else Location(location, s3)
        self.keep = keep
        self._purge_failed = False

    # --- saving -------------------------------------------------------------------------------------------------
    def save(self, step: int, files: Mapping[str, Union[bytes, str, Path]], meta: Optional[Mapping[str, Any]] = None,
             *, listed: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Checkpoint:
        """Writes ``files`` (name -> bytes, or the path of a local file) as the checkpoint of ``step``, then its
        marker, then removes what ``keep`` no longer holds. A step already complete is left as it is (returned). ``listed``: files other processes wrote into the same
        folder (their sizes and digests, e.g. each rank's own), named in the marker too."""
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step={step!r}: a whole number of 0 or more (the global step the checkpoint holds)")
        folder = self.location.child(f"{FOLDER}step-{step:012d}")
        existing = self._read_marker(step)
        if existing is not None and existing.health_stop is not None and not (meta or {}).get(HEALTH_STOP):
            # A health stop's checkpoint of this step and now a good one (the job resumed with the fix): the marker
            # goes first, so the folder counts as torn until the good checkpoint's marker is written.
            self.location.delete([f"{FOLDER}step-{step:012d}/{MARKER}"])
        elif existing is not None and all(folder.read_bytes(name) is not None for name in existing.files):
            return existing  # a complete checkpoint of this step is never rewritten in place
        written: dict[str, dict[str, Any]] = dict(listed or {})
        for name, data in files.items():
            written[name] = self.write_file(folder, name, data)
        return self.mark_complete(step, written, meta)

    @staticmethod
    def write_file(folder: Location, name: str, data: Union[bytes, str, Path]) -> dict[str, Any]:
        """Writes one file into a checkpoint folder; returns its size and SHA-256 (for the marker)."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
            folder.write(name, body)
            return {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        path = Path(data)
        digest, size = _file_sha256(path), path.stat().st_size  # what the marker names is what was read to upload
        folder.upload_file(path, name)
        return {"bytes": size, "sha256": digest}

    def mark_complete(self, step: int, files: Mapping[str, Mapping[str, Any]],
                      meta: Optional[Mapping[str, Any]] = None) -> Checkpoint:
        """Writes the marker that makes the checkpoint of ``step`` count, then removes the checkpoints past ``keep``
        and any older torn one."""
        saved_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        marker = {"format": FORMAT, "step": step, "files": dict(files), "meta": dict(meta or {}), "saved_at": saved_at}
        self.location.write(f"{FOLDER}step-{step:012d}/{MARKER}", json.dumps(marker, indent=1, sort_keys=True))
        self.purge()
        return Checkpoint(step, marker["files"], marker["meta"], saved_at)

    def mark_health_stop(self, step: int, rule: str) -> Optional[Checkpoint]:
        """Marks the complete checkpoint of ``step`` as a health stop's (a state ``rule`` judged bad: kept for
        inspection, never resumed from); one saved at that step before the rule fired holds the same state. None when
        there is no such checkpoint; a marked one is left as it is."""
        existing = self._read_marker(step)
        if existing is None or existing.health_stop is not None:
            return existing
        marker = {"format": FORMAT, "step": step, "files": dict(existing.files),
                  "meta": {**existing.meta, HEALTH_STOP: rule}, "saved_at": existing.saved_at}
        self.location.write(f"{FOLDER}step-{step:012d}/{MARKER}", json.dumps(marker, indent=1, sort_keys=True))
        return Checkpoint(step, marker["files"], marker["meta"], existing.saved_at)

    def save_directory(self, step: int, directory: Union[str, Path], meta: Optional[Mapping[str, Any]] = None) -> Checkpoint:
        """Every file under a local folder (a framework's checkpoint folder) as the checkpoint of ``step``."""
        root = Path(directory)
        torn = [m for m in INCOMPLETE_MARKERS if (root / m).exists()]
        if torn:
            raise CorruptCheckpoint(f"{root}: holds {torn[0]} (a save still in progress or cut short): not uploaded")
        files = {path.relative_to(root).as_posix(): path for path in sorted(root.rglob("*")) if path.is_file()}
        if not files:
            raise ValueError(f"{root}: no files to save")
        return self.save(step, files, meta)

    def purge(self) -> None:
        """Keeps the newest ``keep`` good complete checkpoints and a health stop's newer than all of them; removes
        older ones and torn folders older than the newest complete one (a torn folder newer than it may be a save in
        progress)."""
        steps, complete = self._folders()
        good = sorted(s for s, c in complete.items() if c.health_stop is None)[-self.keep:]
        kept = sorted(good + [s for s, c in complete.items() if c.health_stop is not None and (not good or s > good[-1])])
        newest = kept[-1] if kept else None
        doomed = [s for s in steps if s not in kept and (s in complete or (newest is not None and s < newest))]
        names = [n for s in doomed for n in steps[s]]
        try:
            self.location.delete(names)
        except OSError as error:  # e.g. no s3:DeleteObject: the old checkpoints stay, training goes on
            if not self._purge_failed:
                print(f"ml_platform_job: old checkpoints not removed ({error}); they stay and take space", file=sys.stderr,
                      flush=True)
                self._purge_failed = True

    # --- finding and loading ------------------------------------------------------------------------------------
    def _folders(self) -> tuple[dict[int, list[str]], dict[int, Checkpoint]]:
        """Every step folder's names, and the complete ones (marker there, every file it names there)."""
        steps: dict[int, list[str]] = {}
        for name in self.location.list(FOLDER):
            match = STEP_FOLDER.match(name[len(FOLDER):])
            if match:
                steps.setdefault(int(match[1]), []).append(name)
        complete = {}
        for step, names in steps.items():
            folder = f"{FOLDER}step-{step:012d}/"
            if folder + MARKER not in names:
                continue
            checkpoint = self._read_marker(step)
            if checkpoint is not None and all(folder + f in names for f in checkpoint.files):
                complete[step] = checkpoint
        return steps, complete

    def _read_marker(self, step: int) -> Optional[Checkpoint]:
        text = self.location.read(f"{FOLDER}step-{step:012d}/{MARKER}")
        try:
            marker = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
            return None
        return Checkpoint(step, marker["files"], marker.get("meta") or {}, marker.get("saved_at", ""))

    def complete(self) -> list[Checkpoint]:
        """Every complete checkpoint, oldest first."""
        _, complete = self._folders()
        return [complete[s] for s in sorted(complete)]

    def latest(self) -> Optional[Checkpoint]:
        """The newest complete checkpoint to resume from (a health stop's is not), or None."""
        found = [c for c in self.complete() if c.health_stop is None]
        return found[-1] if found else None

    def load_newest(self, load: Callable[[Checkpoint], T]) -> Optional[tuple[Checkpoint, T]]:
        """``load(checkpoint)`` of the newest complete checkpoint it succeeds on: a corrupt one (``CorruptCheckpoint``
        from ``read`` or ``download``) is reported in one line and the one before it is tried; None when none loads.
        A health stop's checkpoint is passed over (named in one line): the resume starts from the good one before."""
        for checkpoint in reversed(self.complete()):
            if checkpoint.health_stop is not None:
                print(f"ml_platform_job: the checkpoint of step {checkpoint.step} was written by the health rule "
                      f"{checkpoint.health_stop}'s stop (kept for inspection, not resumed from): resuming from the "
                      "good one before it", file=sys.stderr, flush=True)
                continue
            try:
                return checkpoint, load(checkpoint)
            except CorruptCheckpoint as error:
                print(f"ml_platform_job: {error}; trying the checkpoint before it", file=sys.stderr, flush=True)
        return None

    def read(self, checkpoint: Checkpoint, name: str) -> bytes:
        """A file of a checkpoint, checked against its marker (CorruptCheckpoint otherwise)."""
        expected = checkpoint.files.get(name)
        if expected is None:
            raise CorruptCheckpoint(f"{self.location.uri}{checkpoint.folder}: holds no {name}")
        data = self.location.read_bytes(checkpoint.folder + name)
        if data is None or len(data) != expected["bytes"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
            raise CorruptCheckpoint(f"{self.location.uri}{checkpoint.folder}{name}: its bytes are not the ones its "
                                    "marker names")
        return data

    def download(self, checkpoint: Checkpoint, directory: Union[str, Path]) -> Path:
        """Every file of a checkpoint into a local folder, each checked against its marker; returns the folder."""
        root = Path(directory)
        for name, expected in checkpoint.files.items():
            target = root / name
            if not (target.is_file() and target.stat().st_size == expected["bytes"]
                    and _file_sha256(target) == expected["sha256"]):
                self.location.download_file(checkpoint.folder + name, target)
                if target.stat().st_size != expected["bytes"] or _file_sha256(target) != expected["sha256"]:
                    raise CorruptCheckpoint(f"{self.location.uri}{checkpoint.folder}{name}: its bytes are not the ones "
                                            "its marker names")
        return root


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
