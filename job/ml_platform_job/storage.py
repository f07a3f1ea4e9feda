"""A place a job writes under: ``s3://bucket/prefix/`` or a local directory, read and written as text or bytes
(standard library; boto3 for ``s3://``).

Writes are whole or absent: a local file is written to a temporary name beside it and renamed over the target
(``os.replace``, atomic on one filesystem: a SIGKILL mid-write leaves the old file or none, never half of one); an S3
object appears only once its upload completed (PutObject, or the multipart upload ``upload_file`` makes for large
files: https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html). What spans several files (a
checkpoint directory) needs a marker written last: ``checkpoints.CheckpointStore``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional, Union


class Location:
    """A prefix records are written under: ``s3://bucket/prefix/`` or a local directory."""

    def __init__(self, uri: str, s3: Any = None) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise ValueError(f"uri={uri!r}: an s3://bucket/prefix/ or a directory")
        self.uri = uri if uri.endswith("/") else uri + "/"
        self._s3 = s3
        if self.is_s3:
            self.bucket, _, self.prefix = self.uri[len("s3://"):].partition("/")

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            import boto3
            self._s3 = boto3.client("s3")
        return self._s3

    def child(self, name: str) -> "Location":
        """The prefix ``name/`` under this one (the same S3 client)."""
        return Location(self.uri + name.strip("/") + "/", self._s3)

    # --- reading ------------------------------------------------------------------------------------------------
    def read_bytes(self, name: str) -> Optional[bytes]:
        """The object's bytes, or None when there is none."""
        if self.is_s3:
            try:
                return self.s3.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()
            except self.s3.exceptions.NoSuchKey:
                return None
        path = Path(self.uri) / name
        return path.read_bytes() if path.is_file() else None

    def read(self, name: str) -> Optional[str]:
        """The object as UTF-8 text, or None when there is none."""
        data = self.read_bytes(name)
        return None if data is None else data.decode()

    def list(self, prefix: str = "") -> list[str]:
        """Every name under this location that starts with ``prefix`` (files, at any depth, ``/``-separated), sorted."""
        if self.is_s3:
            pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)
            return sorted(o["Key"][len(self.prefix):] for page in pages for o in page.get("Contents", []))
        root = Path(self.uri)
        if not root.is_dir():
            return []
        found = []
        for directory, _, files in os.walk(root):
            for file in files:
                name = (Path(directory) / file).relative_to(root).as_posix()
                if name.startswith(prefix) and not _is_temporary(file):
                    found.append(name)
        return sorted(found)

    def download_file(self, name: str, path: Union[str, Path]) -> None:
        """Copies the object to a local file (S3's managed, multipart download for large objects)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if self.is_s3:
            self.s3.download_file(self.bucket, self.prefix + name, str(path))
        else:
            shutil.copyfile(Path(self.uri) / name, path)

    # --- writing ------------------------------------------------------------------------------------------------
    def write(self, name: str, data: Union[str, bytes]) -> None:
        """Writes text (UTF-8) or bytes, whole or not at all."""
        body = data.encode() if isinstance(data, str) else bytes(data)
        if self.is_s3:
            content_type = ("application/json" if name.endswith(".json") else "text/plain" if isinstance(data, str)
                            else "application/octet-stream")
            self.s3.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body, ContentType=content_type)
            return
        target = Path(self.uri) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def upload_file(self, path: Union[str, Path], name: str) -> None:
        """Copies a local file here, whole or not at all (S3's managed, multipart upload for large files)."""
        if self.is_s3:
            self.s3.upload_file(str(path), self.bucket, self.prefix + name)
            return
        target = Path(self.uri) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(path).resolve() == target.resolve():
            return
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX)
        os.close(handle)
        try:
            shutil.copyfile(path, temporary)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def delete(self, names: list[str]) -> None:
        """Removes the named objects (absent ones are no error)."""
        if not names:
            return
        if self.is_s3:
            for start in range(0, len(names), 1000):  # DeleteObjects takes at most 1,000 keys a call
                answer = self.s3.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self.prefix + n} for n in names[start:start + 1000]], "Quiet": True})
                # S3 refuses keys one by one inside a 200 answer (AccessDenied without s3:DeleteObject): in quiet mode
                # "the response includes only keys for which the delete operation encountered an error"
                # (https://docs.aws.amazon.com/AmazonS3/latest/userguide/DeletingMultipleObjects.html): say so.
                errors = answer.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise OSError(f"{len(errors)} of {len(names)} objects not deleted under {self.uri}: "
                                  f"{first.get('Code')} on {first.get('Key')}")
            return
        root = Path(self.uri)
        for name in names:
            (root / name).unlink(missing_ok=True)
        for directory in sorted({(root / n).parent for n in names}, key=lambda d: -len(d.parts)):
            while directory != root and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
                directory = directory.parent


TEMPORARY_SUFFIX = ".partial"


def _is_temporary(file: str) -> bool:
    """A write in progress (or one a SIGKILL cut short): never listed, never read."""
    return file.startswith(".") and file.endswith(TEMPORARY_SUFFIX)
