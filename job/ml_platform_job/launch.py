"""A job of several processes as the container's first process: ``python -m ml_platform_job launch -- torchrun ...``
(standard library).

ECS sends SIGTERM to the container's first process only, then SIGKILL after the stop timeout. ``torchrun`` forwards the
signal to its workers, and they save and exit 143, but torchrun itself then exits 1 (its ``SignalException``), which
the queue's retry strategy ends as FAILED: the job is never retried. It also SIGKILLs its workers 30 s after the signal
(``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), whatever the queue's stop timeout. The launcher, run in its place:

- runs the command as its child, with ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` the stop timeout less a margin (unless set);
- writes the PID file with its own PID (the fleet's watcher signals it), and points the child's at a file of its own;
- passes SIGTERM (and SIGINT) on to the child, and exits 143 when it was asked to stop, so the queue retries the job
  (which resumes from its newest complete checkpoint); 0 when the child finished anyway; the child's code otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from typing import Mapping, Optional, Sequence

from . import STOPPED_EXIT_CODE
from .stop import StopRequest

SHUTDOWN_MARGIN_SECONDS = 5


def launch(command: Sequence[str], env: Optional[Mapping[str, str]] = None) -> int:
    """Runs ``command`` as described in the module docstring; returns the exit code to exit with."""
    env = dict(os.environ if env is None else env)
    stop = StopRequest(env)
    child_env = dict(env)
    child_env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                         str(max(1, int(stop.stop_timeout) - SHUTDOWN_MARGIN_SECONDS)))
    stop._write_pid_file()
    child_env["ML_PLATFORM_JOB_PID_FILE"] = os.path.join(tempfile.mkdtemp(prefix="ml-platform-launch-"), "job.pid")
    try:
        child = subprocess.Popen(list(command), env=child_env)
    except OSError as error:
        print(f"error: cannot run {command[0]}: {error.strerror}", file=sys.stderr)
        return 127
    asked: list[int] = []

    def forward(signum: int, frame: object) -> None:
        asked.append(signum)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if code == 0:
        return 0
    if asked:
        print(f"ml_platform_job launch: stopped ({signal.Signals(asked[0]).name}); exit {STOPPED_EXIT_CODE} (the "
              f"queue retries it; the child exited {code})", file=sys.stderr, flush=True)
        return STOPPED_EXIT_CODE
    return 128 - code if code < 0 else code
