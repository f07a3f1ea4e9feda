"""The frameworks tier: the job side with real PyTorch, transformers and Lightning (CPU), in an environment without the
CDK. Every example is rehearsed as a queue would run it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def pytest_configure(config):
    try:
        import aws_cdk  # noqa: F401
    except ImportError:
        return
    raise pytest.UsageError("the frameworks tier runs where aws-cdk-lib is not installed (./platform test-frameworks: "
                            ".venv/frameworks), so that it shows the job side needs none of it")


@pytest.fixture
def python() -> str:
    return sys.executable
