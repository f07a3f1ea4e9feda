"""The rehearsal cannot be passed by a job that would fail a real reclaim (issue 35 review): a stop that writes no
checkpoint of its step fails (the field report of a SIGTERM save that fired 0 times in 6), and without deterministic
algorithms a second uninterrupted run tells a resume that changed the result (FAIL) from a job that is merely
non-deterministic (not checked)."""

import sys

import pytest

from ml_platform_job.rehearse import format_lines, rehearse

# A stand-in's resume from its newest checkpoint, with SIGTERM noted (shared with test_rehearse_health's stand-in).
RESUMES = """store = CheckpointStore(os.environ["ML_PLATFORM_CHECKPOINT_URI"])
latest = store.latest()
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
step = latest.step if latest else 0
if latest:
    run.restored(step, latest.folder)
"""
# A stand-in job with the run record and the checkpoints of the job side, in one of three modes.
STAND_IN = """
import os, signal, sys, time
from ml_platform_job.checkpoints import CheckpointStore
from ml_platform_job.tracking import TrackedRun

MODE = {mode!r}
run = TrackedRun.start(params={{"mode": MODE}}, env=dict(os.environ), code_directory=os.path.dirname(__file__))
if run.finished:
    sys.exit(0)
""" + RESUMES + """else:
    store.save(0, {{"state": b"0"}})
while step < 100:
    if stopping:
        saved = MODE != "no save at the stop"
        if saved:
            store.save(step, {{"state": str(step).encode()}})
        run.stop("SIGTERM", step=step, saved=saved)
        sys.exit(143)
    step += 1
    time.sleep(0.01)
digests = {{"no save at the stop": "a" * 64, "the resume changes it": ("b" if latest else "a") * 64,
            "non-deterministic": os.urandom(32).hex()}}
run.finish(final_state_sha256=digests[MODE])
"""


def rehearsed(tmp_path, mode, exact=False):
    job = tmp_path / "job.py"
    job.write_text(STAND_IN.format(mode=mode))
    return rehearse([sys.executable, str(job)], workdir=str(tmp_path / "work"), exact=exact, signal_delay=0.2)


def test_a_stop_that_saves_nothing_fails_though_an_older_checkpoint_resumes(tmp_path):
    result = rehearsed(tmp_path, "no save at the stop")
    checks = {check.name: check for check in result.checks}
    stop = checks["a checkpoint of the step it stopped at"]
    assert stop.passed is False and stop.detail.startswith("none: the retry resumes from step 0, and the steps since are "
                                                           "lost"), format_lines(result)
    assert checks["the retry resumed (did not start over)"].passed  # it did resume: the check that catches it is above
    assert format_lines(result)[-1] == ("rehearsal: FAIL: a checkpoint of the step it stopped at (read "
                                        "docs/BRING_YOUR_SCRIPT.md)")


@pytest.mark.parametrize("mode, passed, detail", [
    ("the resume changes it", False, "the weights differ (bbbbbbbbbbbb... vs aaaaaaaaaaaa...), and two uninterrupted "
                                     "runs agree with each other: the stop and resume changed the result"),
    ("non-deterministic", None, "not checked: two uninterrupted runs differ too"),
])
def test_without_deterministic_algorithms_a_second_run_decides(tmp_path, mode, passed, detail):
    result = rehearsed(tmp_path, mode, exact=True)
    exact = result.checks[-1]
    assert exact.name == "the final state equals an uninterrupted run's"
    assert (exact.passed, exact.detail[:len(detail)]) == (passed, detail), format_lines(result)
    assert (tmp_path / "work" / "attempt-4.log").exists()
