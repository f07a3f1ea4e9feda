"""When a job must stop: SIGTERM or the stop file, the time left before SIGKILL, the PID file, and every rank agreeing
on the step to stop at (standard library; torch.distributed when a process group is up).

- SIGTERM: on AWS Batch, ECS sends it to the container and SIGKILL after the agent's ``ECS_CONTAINER_STOP_TIMEOUT``
  (30 s by default; a TrainingQueue sets it, 110 s by default, and tells the job in ``ML_PLATFORM_STOP_TIMEOUT_SECONDS``:
  https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html). The platform's interruption
  watcher also sends it on a Spot notice (2 minutes before the instance goes).
- The stop file (``ML_PLATFORM_STOP_FILE``): the watcher writes it (JSON with the reason and, for a Spot notice, the
  deadline in epoch seconds) before it signals; a job that cannot take signals (a child process) sees it instead.
- The PID file (``ML_PLATFORM_JOB_PID_FILE``): on a fleet the watcher signals that process, and reports the fleet busy
  while it lives.

As Lightning's signal connector does, the handler only sets a flag the training loop reads between steps; it chains a
handler installed before it, is installed from the main thread only, and is put back by ``uninstall``. A rank that
stopped alone would leave the others waiting in their next collective forever: ``agreed`` makes the flag every rank's
(an all-reduce of the flag, MAX), so all of them save the same step and exit together.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Optional

DEFAULT_STOP_FILE = "/run/ml-platform/stop-requested"
DEFAULT_PID_FILE = "/run/ml-platform/job.pid"
# ECS's default: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html
DEFAULT_STOP_TIMEOUT_SECONDS = 30.0
STOP_FILE_CHECK_SECONDS = 1.0  # the stop file is looked at no more often than this (a stat call per step otherwise)
# A save on a stop must end this long before SIGKILL (the exit, the log's flush).
SAVE_MARGIN_SECONDS = 5.0
# The launcher's private folder (``launch``), where a process of the job marks that it stopped by the contract.
LAUNCH_DIR = "ML_PLATFORM_LAUNCH_DIR"
STOPPED_MARKER = "stopped"


class StopRequest:
    """Whether the job was asked to stop, and how long it has left. One per process; ``install`` it first thing."""

    def __init__(self, env: Optional[Mapping[str, str]] = None, *, now: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        env = os.environ if env is None else env
        self.stop_file = env.get("ML_PLATFORM_STOP_FILE") or DEFAULT_STOP_FILE
        self.pid_file = env.get("ML_PLATFORM_JOB_PID_FILE") or DEFAULT_PID_FILE
        self.stop_timeout = _seconds(env.get("ML_PLATFORM_STOP_TIMEOUT_SECONDS"), DEFAULT_STOP_TIMEOUT_SECONDS)
        self.first_on_node = (env.get("LOCAL_RANK") or "0").strip() == "0"
        self._now, self._wall = now, wall
        self.signalled_at: Optional[float] = None
        self.reason: Optional[str] = None
        self._file_checked_at = float("-inf")
        self._file_seen = False
        self._previous: Any = None
        self._installed = False

    # --- setting up ---------------------------------------------------------------------------------------------
    def install(self) -> "StopRequest":
        """Writes the PID file (the node's first process only: ``LOCAL_RANK`` 0 or unset, the one the watcher signals;
        the others hear of the stop through ``agreed``) and installs the SIGTERM handler (from the main thread;
        elsewhere only the stop file is seen, and a warning says so). Idempotent."""
        if self._installed:
            return self
        if self.first_on_node:
            self._write_pid_file()
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        else:
            print("ml_platform_job: not on the main thread: SIGTERM cannot be handled here, only the stop file is seen",
                  file=sys.stderr)
        self._installed = True
        return self

    def _write_pid_file(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.pid_file) or ".", exist_ok=True)
            with open(self.pid_file, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as error:  # a read-only /run outside the platform: the watcher then cannot signal this job
            print(f"ml_platform_job: cannot write the PID file {self.pid_file} ({error.strerror}); set "
                  "ML_PLATFORM_JOB_PID_FILE to a writable path", file=sys.stderr)

    def take_over(self) -> None:
        """Makes this handler SIGTERM's only one (a framework's handler that would stop the loop at a step of its own
        choosing, Lightning's, no longer sees it); ``uninstall`` puts that handler back. From the main thread."""
        if self._installed and threading.current_thread() is threading.main_thread():
            framework = signal.signal(signal.SIGTERM, self._on_sigterm_alone)
            if framework is not self._on_sigterm:
                self._previous = framework

    def _on_sigterm_alone(self, signum: int, frame: Any) -> None:
        self._signalled()

    def uninstall(self) -> None:
        """Puts back the SIGTERM handler there was before ``install``."""
        if self._installed and threading.current_thread() is threading.main_thread() and self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        self._installed = False

    def _signalled(self) -> None:
        self.request("SIGTERM")

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self._signalled()
        previous = self._previous
        if callable(previous) and previous not in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler):
            previous(signum, frame)  # a handler installed before ours (a framework's) sees it too

    # --- asking ---------------------------------------------------------------------------------------------------
    def request(self, reason: str) -> None:
        """Asks the job to stop (the signal handler's, the stop file's, or a caller's own reason)."""
        if self.signalled_at is None:
            self.signalled_at = self._now()
            self.reason = reason

    @property
    def requested(self) -> bool:
        """True once SIGTERM came or the stop file exists (looked at once a second at most)."""
        if self.signalled_at is not None:
            return True
        now = self._now()
        if now - self._file_checked_at >= STOP_FILE_CHECK_SECONDS:
            self._file_checked_at = now
            if os.path.exists(self.stop_file):
                self.request(f"the stop file {self.stop_file}{self._stop_file_reason()}")
        return self.signalled_at is not None

    def _notice(self) -> dict:
        """The stop file's JSON (the watcher's reason and deadline), or {} when there is none or it is not JSON."""
        try:
            with open(self.stop_file) as handle:
                notice = json.load(handle)
        except (OSError, ValueError):
            return {}
        return notice if isinstance(notice, dict) else {}

    def _stop_file_reason(self) -> str:
        reason = self._notice().get("reason")
        return f" ({reason})" if reason else ""

    def seconds_left(self) -> Optional[float]:
        """Seconds until SIGKILL since the stop was asked for (None before): the stop timeout, or a Spot notice's
        deadline in the stop file when that comes first."""
        if self.signalled_at is None:
            return None
        left = self.stop_timeout - (self._now() - self.signalled_at)
        deadline = self._stop_file_deadline()
        if deadline is not None:
            left = min(left, deadline - self._wall())
        return left

    def _stop_file_deadline(self) -> Optional[float]:
        deadline = self._notice().get("deadline")
        return float(deadline) if isinstance(deadline, (int, float)) and not isinstance(deadline, bool) else None

    def save_fits(self, last_save_seconds: Optional[float]) -> bool:
        """Whether a save that took ``last_save_seconds`` last time fits in the time left before SIGKILL, less
        ``SAVE_MARGIN_SECONDS`` (True when either is unknown: the save is then bounded by ``bounded``)."""
        left = self.seconds_left()
        return last_save_seconds is None or left is None or last_save_seconds + SAVE_MARGIN_SECONDS <= left

    @contextmanager
    def bounded(self) -> Iterator[None]:
        """Runs the block (a save on a stop) for at most the time left before SIGKILL less ``SAVE_MARGIN_SECONDS``,
        then raises ``SaveTimedOut``: a save cut short is never loaded (checkpoints are complete or absent), and the job
        exits 143 in time instead of being killed (exit 137, which the queue does not retry). From the main thread; a
        block in one long C call is cut when the call returns."""
        left = self.seconds_left()
        if left is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        budget = max(0.1, left - SAVE_MARGIN_SECONDS)

        def expire(signum: int, frame: Any) -> None:
            raise SaveTimedOut(f"the save did not finish in the {budget:.1f} s left before SIGKILL")

        started = self._now()
        previous = signal.signal(signal.SIGALRM, expire)
        before, interval = signal.setitimer(signal.ITIMER_REAL, budget)  # a timer of the job's own: put back after
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if before:
                signal.setitimer(signal.ITIMER_REAL, max(0.001, before - (self._now() - started)), interval)

    def save_in_time(self, write: Callable[[], Any]) -> tuple[bool, str]:
        """``write()`` (a checkpoint's files and marker, on a stop) within ``bounded``: (True, "checkpoint written"), or
        (False, why not) when it ran out of time or failed. Either way the job exits 143 after: the retry resumes from
        the checkpoint before."""
        try:
            with self.bounded():
                write()
        except SaveTimedOut as error:
            return False, f"no checkpoint: {error}"
        except Exception as error:
            return False, f"no checkpoint: the save failed ({type(error).__name__}: {error})"
        return True, "checkpoint written"

    def deadline(self, on_expire: Callable[[], None]) -> None:
        """Arms the time left before SIGKILL, less ``SAVE_MARGIN_SECONDS``, for a save a framework makes itself (the
        Trainer's): when it runs out, ``on_expire()`` (record the stop), then exit 143, in time, instead of being
        killed with 137, which the queue does not retry. ``disarm`` once the save is done."""
        left = self.seconds_left()
        if left is None or threading.current_thread() is not threading.main_thread():
            return

        def expire(signum: int, frame: Any) -> None:
            on_expire()
            raise SystemExit(143)

        self._armed = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, max(0.1, left - SAVE_MARGIN_SECONDS))

    def disarm(self) -> None:
        if getattr(self, "_armed", None) is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._armed)
            self._armed = None

    def stopped(self) -> None:
        """Tells a launcher in front of this process (``launch``: ``ML_PLATFORM_LAUNCH_DIR``) that the job stopped
        by the contract, so that it exits 143 although torchrun exits 1 (the stop came through the stop file, or from
        another node's rank)."""
        directory = os.environ.get(LAUNCH_DIR)
        if directory:
            try:
                with open(os.path.join(directory, STOPPED_MARKER), "w") as handle:
                    handle.write(self.reason or "stopped")
            except OSError:
                pass

    def agreed(self) -> bool:
        """``requested`` on any rank, as every rank sees it: an all-reduce (MAX) of the flag when a torch.distributed
        process group of more than one rank is up; the local flag otherwise. Every rank must call it at the same
        step (it is a collective)."""
        local = self.requested
        [agreed] = all_ranks_max([local])
        if agreed and not local:
            self.request("another rank was asked to stop")
        return agreed


class SaveTimedOut(Exception):
    """A save on a stop ran past the time left before SIGKILL (``StopRequest.bounded``)."""


def all_ranks_max(flags: list[bool]) -> list[bool]:
    """Each flag, true when it is true on any rank: one all-reduce (MAX) when a torch.distributed process group of more
    than one rank is up (a collective: every rank calls it at the same point), the flags themselves otherwise. On NCCL
    the tensor goes to this process's GPU (``LOCAL_RANK``, else the current device)."""
    dist = _distributed()
    if dist is None:
        return list(flags)
    import torch  # type: ignore[import-not-found]

    values = torch.tensor([int(bool(flag)) for flag in flags], dtype=torch.int32, device=collective_device(dist))
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return [bool(value) for value in values.tolist()]


def collective_device(dist: Any) -> Any:
    """Where a collective's tensors go: the CPU on gloo; on NCCL this process's GPU (``LOCAL_RANK``, else the current
    device: a DDP script calls ``torch.cuda.set_device(local_rank)`` first)."""
    import torch  # type: ignore[import-not-found]

    if dist.get_backend() != "nccl":
        return torch.device("cpu")
    local = os.environ.get("LOCAL_RANK", "").strip()
    return torch.device("cuda", int(local) if local.isdigit() else torch.cuda.current_device())


def _distributed() -> Any:
    """torch.distributed when a process group of more than one rank is up, else None (torch not even imported when
    the job has not imported it)."""
    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist  # type: ignore[import-not-found]

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def release_process_group() -> None:
    """On a stop, after the last collective every rank makes on it: a barrier (no rank leaves while another still
    needs it), then the process group destroyed, so that the process exits through its handler (143) and not through
    the C++ runtime's terminate (SIGABRT, -6: the group's threads still running when the interpreter shuts down, seen
    on gloo; PyTorch warns of the same with NCCL). A script's own ``destroy_process_group`` at its end is not reached
    on a stop."""
    dist = _distributed()
    if dist is None:
        return
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()


def rank() -> int:
    """This process's global rank: torch.distributed's when up, else ``RANK`` (torchrun). Lightning's launcher sets
    ``LOCAL_RANK`` and ``NODE_RANK`` but no ``RANK`` in the processes it starts: 0 only when both are 0 (or unset);
    a process known only to be another rank is 1 here."""
    dist = _distributed()
    if dist is not None:
        return dist.get_rank()
    given = os.environ.get("RANK", "").strip()
    if given.isdigit():
        return int(given)
    local, node = (os.environ.get(name, "0").strip() or "0" for name in ("LOCAL_RANK", "NODE_RANK"))
    return 0 if (local, node) == ("0", "0") else 1


def world_size() -> int:
    dist = _distributed()
    if dist is not None:
        return dist.get_world_size()
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _seconds(value: Optional[str], default: float) -> float:
    try:
        seconds = float(value) if value else default
    except ValueError:
        return default
    return seconds if seconds > 0 else default
