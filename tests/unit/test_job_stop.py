"""When a job must stop (issue 35): SIGTERM or the stop file, a handler that only sets a flag and chains the one before
it, the time left before SIGKILL (the queue's stop timeout, or a Spot notice's deadline when sooner), the PID file."""

import json
import os
import signal

import pytest

from ml_platform_job.stop import DEFAULT_STOP_TIMEOUT_SECONDS, StopRequest


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def request(tmp_path, **env):
    return StopRequest({"ML_PLATFORM_STOP_FILE": str(tmp_path / "stop-requested"),
                        "ML_PLATFORM_JOB_PID_FILE": str(tmp_path / "run" / "job.pid"), **env},
                       now=Clock(), wall=lambda: 5000.0)


def test_sigterm_sets_the_flag_chains_the_handler_before_it_and_is_put_back(tmp_path):
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        stop = request(tmp_path).install()
        assert int((tmp_path / "run" / "job.pid").read_text()) == os.getpid()
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.reason == "SIGTERM" and seen == [signal.SIGTERM]
        stop.uninstall()
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM, signal.SIGTERM]  # the earlier handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_stop_file_is_seen_with_its_reason_at_most_once_a_second(tmp_path):
    stop = request(tmp_path)
    assert not stop.requested
    (tmp_path / "stop-requested").write_text(json.dumps({"reason": "spot-interruption", "deadline": 5100}))
    assert not stop.requested  # looked at a moment ago: not again within the second
    stop._now.now += 1.0
    assert stop.requested and stop.reason == f"the stop file {tmp_path / 'stop-requested'} (spot-interruption)"


def test_the_time_left_is_the_stop_timeout_or_the_spot_deadline_whichever_comes_first(tmp_path):
    stop = request(tmp_path, ML_PLATFORM_STOP_TIMEOUT_SECONDS="110")
    assert stop.seconds_left() is None
    stop.request("SIGTERM")
    stop._now.now += 10
    assert stop.seconds_left() == 100
    (tmp_path / "stop-requested").write_text(json.dumps({"reason": "spot-interruption", "deadline": 5060}))
    assert stop.seconds_left() == 60  # the notice's deadline, 60 s after the wall clock's 5000


@pytest.mark.parametrize("value", ["", "0", "-5", "soon"])
def test_a_missing_or_bad_stop_timeout_is_ecss_default(tmp_path, value):
    assert request(tmp_path, ML_PLATFORM_STOP_TIMEOUT_SECONDS=value).stop_timeout == DEFAULT_STOP_TIMEOUT_SECONDS == 30


def test_an_unwritable_pid_file_is_one_line_not_a_crash(tmp_path, capsys):
    (tmp_path / "run").write_text("a file where the directory should be")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        request(tmp_path).install()
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert err.startswith("ml_platform_job: cannot write the PID file") and err.count("\n") == 1


def test_without_torch_distributed_the_agreement_is_the_local_flag(tmp_path):
    stop = request(tmp_path)
    assert stop.agreed() is False
    stop.request("SIGTERM")
    assert stop.agreed() is True


def test_a_bounded_save_is_cut_at_the_time_left_and_the_jobs_own_timer_comes_back(tmp_path):
    import time

    from ml_platform_job.stop import SaveTimedOut

    stop = StopRequest({"ML_PLATFORM_STOP_FILE": str(tmp_path / "none"), "ML_PLATFORM_STOP_TIMEOUT_SECONDS": "5.3"})
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 50)  # the job's own timer
    try:
        stop.request("SIGTERM")
        with pytest.raises(SaveTimedOut, match=r"the save did not finish in the 0\.\d s left before SIGKILL"):
            with stop.bounded():
                time.sleep(5)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 40 < remaining <= 50
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
