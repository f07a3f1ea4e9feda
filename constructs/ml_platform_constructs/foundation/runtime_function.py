"""The platform's Lambda functions: Python from the library's runtime/ folder, standard library and boto3 only."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from .. import runtime
from .nag_support import suppress_checkov


def runtime_source(name: str) -> Path:
    """Where a Lambda function's file comes from: its room of ``ml_platform_constructs/runtime`` (handlers, agents,
    decisions), or, when no room holds it, the job side's package (``ml_platform_job``: the price table and its
    reader, which jobs use too)."""
    return runtime.source(name) or Path(str(resources.files("ml_platform_job"))) / name


def _holds(folder: Path, texts: Mapping[str, bytes]) -> bool:
    """Whether ``folder`` is this user's and holds exactly ``texts`` (a file removed by a /tmp cleaner, or planted by
    another user, would otherwise ship in the function's asset)."""
    try:
        owned = not hasattr(os, "getuid") or folder.stat().st_uid == os.getuid()  # (no owner to check on Windows)
        return (owned and sorted(p.name for p in folder.iterdir()) == sorted(texts)
                and all((folder / name).read_bytes() == text for name, text in texts.items()))
    except OSError:
        return False


def _staged(texts: Mapping[str, bytes]) -> Path:
    """A folder holding exactly ``texts``: staged once per content (the asset is copied from it at synth), so that
    repeated synths reuse it, and staged again wherever the shared one does not hold them any more."""
    digest = hashlib.sha256(b"".join(n.encode() + b"\0" + texts[n] for n in sorted(texts))).hexdigest()[:16]
    staged = Path(tempfile.gettempdir()) / f"ml-platform-runtime-{digest}"
    if _holds(staged, texts):
        return staged
    building = Path(tempfile.mkdtemp(prefix=f"ml-platform-runtime-{digest}-"))
    for name, text in texts.items():
        (building / name).write_bytes(text)
    if not staged.exists():
        try:
            building.rename(staged)
            return staged
        except OSError:  # another synth staged the same content first
            pass
        if _holds(staged, texts):
            shutil.rmtree(building, ignore_errors=True)
            return staged
    return building  # the shared folder is damaged or another user's: this synth's own copy


def runtime_function(scope: Construct, id: str, *, handler: str, files: Sequence[str],
                     replace: Optional[Mapping[str, str]] = None, **options: Any) -> lambda_.Function:
    """A Python 3.14 arm64 function whose asset holds only ``files`` (each from ``runtime_source``), those named in
    ``replace`` with the text given there instead (e.g. a team's own price table)."""
    sources = {name: runtime_source(name) for name in files}
    folders = {source.parent for source in sources.values()}
    code = str(next(iter(folders)))
    if replace or len(folders) > 1:
        texts = {name: replace[name].encode() if replace and name in replace else source.read_bytes()
                 for name, source in sources.items()}
        code = str(_staged(texts))
    function = lambda_.Function(
        scope, id, runtime=lambda_.Runtime.PYTHON_3_14, architecture=lambda_.Architecture.ARM_64, handler=handler,
        code=lambda_.Code.from_asset(code, exclude=["*", *[f"!{name}" for name in files]]), **options)
    Validations.of(function.role).acknowledge(Acknowledgment(
        id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        reason="The AWS-managed basic execution policy only writes the function's own logs."))
    # The caller suppresses CKV_AWS_116 (dead-letter queue) itself: whether failures need one depends on the trigger.
    suppress_checkov(function, "CKV_AWS_115", "A reserved concurrency would take from the account's unreserved "
                     "pool, which new accounts keep at its minimum: the deploy would fail; invocations are few anyway")
    suppress_checkov(function, "CKV_AWS_117", "Calls only AWS APIs (some, like Budgets, without a VPC endpoint); "
                     "inside a VPC it would need a NAT gateway or an endpoint per API and gain no isolation")
    suppress_checkov(function, "CKV_AWS_173", "Its environment holds names, ARNs and thresholds, no secrets; "
                     "Lambda encrypts it at rest with its AWS managed key")
    return function
