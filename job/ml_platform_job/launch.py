"""A job of several processes as the container's first process: ``python -m ml_platform_job launch -- torchrun ...``
(standard library).

ECS sends SIGTERM to the container's first process only, then SIGKILL after the stop timeout. ``torchrun`` forwards the
signal to its workers, and they save and exit 143, but torchrun itself then exits 1 (its ``SignalException``), which
the queue's retry strategy ends as FAILED: the job is never retried. It also SIGKILLs its workers 30 s after the signal
(``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), whatever the queue's stop timeout. The launcher, run in its place:

- runs the command as its child, with ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` the stop timeout less a margin (unless set);
- writes the PID file with its own PID (the fleet's watcher signals it), and points the child's at a file of its own;
- passes the first SIGTERM (or SIGINT) on to the child (a second would cut torchrun's own shutdown short), and exits
  143 when the job was stopped: the launcher was signalled, the stop file exists, or a process of the job marked
  that it stopped by the contract (the stop reached it another way: the stop file, another node's rank), so the
  queue retries it (it resumes from its newest complete checkpoint); 0 when the child finished anyway; the child's
  code otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Mapping, Optional, Sequence

from . import STOPPED_EXIT_CODE
from .elastic import RESIZE_EXIT_CODE, RESIZE_MARKER
from .health import HEALTH_MARKER, HEALTH_STOPPED_EXIT_CODE
from .stop import LAUNCH_DIR, STOPPED_MARKER, StopRequest

SHUTDOWN_MARGIN_SECONDS = 5


def launch(command: Sequence[str], env: Optional[Mapping[str, str]] = None) -> int:
    """Runs ``command`` as described in the module docstring; returns the exit code to exit with."""
    env = dict(os.environ if env is None else env)
    stop = StopRequest(env)
    asked: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(signum: int, frame: object) -> None:
        asked.append(signum)
        if len(asked) == 1 and child:  # the first only: a second would cut torchrun's own graceful shutdown short
            try:
                child[0].send_signal(signum)
            except ProcessLookupError:
                pass

    # Installed before the child starts: a SIGTERM in between is kept and passed on once the child is there.
    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    private = tempfile.mkdtemp(prefix="ml-platform-launch-")
    try:
        child_env = dict(env)
        child_env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                             str(max(1, int(stop.stop_timeout) - SHUTDOWN_MARGIN_SECONDS)))
        child_env["ML_PLATFORM_JOB_PID_FILE"] = os.path.join(private, "job.pid")
        child_env[LAUNCH_DIR] = private
        stop._write_pid_file()
        try:
            child.append(subprocess.Popen(list(command), env=child_env))
        except OSError as error:
            print(f"error: cannot run {command[0]}: {error.strerror}", file=sys.stderr)
            return 127
        if asked:
            child[0].send_signal(asked[0])
        code = child[0].wait()
        # A health rule stopped the job (every worker exits 85; torchrun itself exits 1): 85 for the queue, not 143
        healthy = not os.path.exists(os.path.join(private, HEALTH_MARKER))
        resized = os.path.exists(os.path.join(private, RESIZE_MARKER))
        stopped = bool(asked) or os.path.exists(stop.stop_file) or os.path.exists(os.path.join(private, STOPPED_MARKER))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        shutil.rmtree(private, ignore_errors=True)
    if code == 0:
        return 0
    if not healthy:
        print(f"ml_platform_job launch: a health rule stopped the job; exit {HEALTH_STOPPED_EXIT_CODE} (the queue "
              f"does not retry it; the child exited {code})", file=sys.stderr, flush=True)
        return HEALTH_STOPPED_EXIT_CODE
    if resized:  # the resize's checkpoint is written: a SIGTERM that came meanwhile changes nothing
        print(f"ml_platform_job launch: the job asked to be resized; exit {RESIZE_EXIT_CODE} (the queue's elastic "
              f"controller resubmits it at the new size; the child exited {code})", file=sys.stderr, flush=True)
        return RESIZE_EXIT_CODE
    if stopped:
        why = signal.Signals(asked[0]).name if asked else "the job stopped by the contract"
        print(f"ml_platform_job launch: stopped ({why}); exit {STOPPED_EXIT_CODE} (the queue retries it; the child "
              f"exited {code})", file=sys.stderr, flush=True)
        return STOPPED_EXIT_CODE
    return 128 - code if code < 0 else code
