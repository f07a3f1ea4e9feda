"""The frameworks tier: the job side with real PyTorch, transformers and Lightning (CPU), in an environment without the
CDK. Every example is rehearsed as a queue would run it."""

from __future__ import annotations

import json
import os
import subprocess
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


def stop_resume_and_compare(script: Path, tmp_path: Path, step: int, **env: str) -> None:
    """Runs ``script`` (which asks for a stop at global step ``STOP_AT``) as attempt 1 (exit 143), then its retry
    (exit 0), then once uninterrupted under a prefix of its own; the retry resumed from ``step`` and both runs ended
    with the same weights."""
    def attempt(uri: Path, number: int, stop_at: int) -> subprocess.CompletedProcess:
        run_env = {**os.environ, "ML_PLATFORM_CHECKPOINT_URI": str(uri), "ML_PLATFORM_STOP_FILE": str(tmp_path / "none"),
                   "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "pid"), "AWS_BATCH_JOB_ATTEMPT": str(number),
                   "STOP_AT": str(stop_at), **env}
        return subprocess.run([sys.executable, str(script)], env=run_env, capture_output=True, text=True, timeout=600)

    first = attempt(tmp_path / "stopped", 1, step)
    assert first.returncode == 143, first.stdout[-2000:] + first.stderr[-2000:]
    assert attempt(tmp_path / "stopped", 2, -1).returncode == 0
    assert attempt(tmp_path / "clean", 1, -1).returncode == 0
    stopped, clean = (json.loads((tmp_path / name / "passport.json").read_text()) for name in ("stopped", "clean"))
    assert stopped["passport"]["attempts"][1]["restored_from"]["step"] == step
    assert stopped["final_state_sha256"] == clean["final_state_sha256"]
