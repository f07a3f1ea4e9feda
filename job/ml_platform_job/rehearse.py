"""The rehearsal: runs a job command as a training queue would, sends it SIGTERM mid-run as a Spot reclaim does,
retries it as the queue's retry strategy would, and says whether it survived, before the first real reclaim does
(standard library).

    python -m ml_platform_job rehearse [--exact] [--datasets DIR] [--json] -- python train.py --epochs 3
    ./platform job rehearse ...                      (the same, from the platform's checkout; --s3: emulated S3)

1. Attempt 1 runs with the contract's variables (``ML_PLATFORM_CHECKPOINT_URI`` a fresh directory, or ``--checkpoints``
   an ``s3://`` prefix; the stop file, PID file, job name, ``AWS_BATCH_JOB_ATTEMPT=1``, the stop timeout). Once its
   first complete checkpoint exists (``checkpoints.CheckpointStore``) and a little more (``--signal-delay``, 0.5 s by
   default: the job is stepping again, and the signal lands mid-step, as a reclaim's does), it gets SIGTERM; if no checkpoint comes within
   ``--signal-after`` seconds, it gets SIGTERM then. ECS sends SIGKILL ``--stop-timeout`` seconds later (30 s by
   default, ECS's; a TrainingQueue's is 110 s): so does the rehearsal.
2. The queue retries exit 143 only (``training.queue_jobs.retry_strategies``): attempt 2 runs with the same
   variables and ``AWS_BATCH_JOB_ATTEMPT=2``, to the end.
3. With ``--exact``, the command runs once more, uninterrupted, under a checkpoint prefix of its own (a run of its
   own) and with the same seed (``ML_PLATFORM_SEED``, which a job that names no seed takes), and the two runs' final
   weights are compared (the digest ``TrainingJob.finish`` records).

4. The training-health rules (``health.py``, docs/HEALTH.md) as the run recorded them: each rule's verdict ("ok (N
   checks)", "not judged: <why>", "off", "fired at step N"), a FAIL when a rule stopped the run (exit 85, which the
   queue never retries: the rule, the step, the values and the fix), and a warning when the longest time without
   progress came over half the stall rule's threshold (a real run's slower data or longer validation would stop).

One line per check, then ``rehearsal: PASS`` (exit 0) or ``rehearsal: FAIL: <reason> (read ...)`` (exit 3, the
operator commands' "decided against"); 2 for a command line it cannot run. Each attempt's output is kept in the work
directory (``--workdir``; a temporary one by default, named in the output).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from . import STOPPED_EXIT_CODE
from .checkpoints import CheckpointStore
from .health import FIXES, HEALTH_STOPPED_EXIT_CODE, RULES, STALL_ENV, STALL_SECONDS
from .storage import Location
from .tracking import RECORD_NAME

DOCS = "docs/BRING_YOUR_SCRIPT.md"
HEALTH_DOCS = "docs/HEALTH.md"
HEALTH_CHECK = "no health rule stopped the run"
# The exit codes of a verdict, the operator commands' (docs/COMMANDS.md, "Exit codes": 0 decided for, 1 an error, 2 a
# bad argument, 3 decided against, 4 not judged), defined again here: the job side imports nothing of the constructs
# library, which defines them for its commands and the platform's (ml_platform_constructs.operations.cli).
EXIT_PASS = 0
EXIT_FAIL = 3
DEFAULT_STOP_TIMEOUT = 30.0  # ECS's ECS_CONTAINER_STOP_TIMEOUT default
DEFAULT_SIGNAL_AFTER = 300.0
DEFAULT_ATTEMPT_TIMEOUT = 3600.0
POLL_SECONDS = 0.2
DEFAULT_SIGNAL_DELAY = 0.5  # after the first complete checkpoint: the job is stepping again by then


@dataclass
class Check:
    """One thing the rehearsal checked: ``passed`` True, False, or None (not checked, and why in ``detail``)."""
    name: str
    passed: Optional[bool]
    detail: str
    fix: str = ""
    docs: str = ""  # the page a FAIL of this check sends to (default: DOCS)

    @property
    def label(self) -> str:
        return {True: "PASS", False: "FAIL", None: "----"}[self.passed]


@dataclass
class Rehearsal:
    command: list[str]
    workdir: str
    checks: list[Check] = field(default_factory=list)
    # The training-health rules as the run recorded them (``health_report``): each rule's verdict, the stop, the
    # longest gap without progress; None before the rehearsal has read the record.
    health: Optional[dict] = None
    warnings: list[str] = field(default_factory=list)  # WARN lines: they fail nothing

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed is not False for check in self.checks)

    @property
    def verdict(self) -> str:
        """The last line: PASS, or FAIL with the first failed check and the page to read."""
        if self.passed:
            return "rehearsal: PASS"
        failed = next(check for check in self.checks if check.passed is False)
        return f"rehearsal: FAIL: {failed.name} (read {failed.docs or DOCS})"

    def to_dict(self) -> dict:
        return {"command": self.command, "workdir": self.workdir, "passed": self.passed, "verdict": self.verdict,
                "checks": [asdict(check) for check in self.checks], "health": self.health,
                "warnings": list(self.warnings)}


@dataclass
class Attempt:
    number: int
    exit_code: Optional[int]
    seconds: float
    log: Path
    signalled_after: Optional[float] = None  # seconds from start to SIGTERM
    signalled_at: Optional[str] = None  # its wall time, as checkpoint markers write theirs
    exited_after_signal: Optional[float] = None
    killed: bool = False
    first_checkpoint_after: Optional[float] = None
    timed_out: bool = False

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip()[:200] for line in text[-lines:])


class Runner:
    """Runs attempts of a command in its own process group, its output to a log file."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], workdir: Path,
                 progress: Callable[[str], None]) -> None:
        self.command, self.env, self.workdir, self.progress = list(command), dict(env), workdir, progress
        self.process: Optional[subprocess.Popen] = None

    def run(self, number: int, env: Mapping[str, str], *, checkpoint_uri: str, stop_after_checkpoint: bool,
            signal_after: float, stop_timeout: float, attempt_timeout: float,
            signal_delay: Optional[float] = None) -> Attempt:
        log = self.workdir / f"attempt-{number}.log"
        store = CheckpointStore(Location(checkpoint_uri))
        started = time.monotonic()
        with open(log, "wb") as out:
            try:
                self.process = subprocess.Popen(self.command, env={**self.env, **env}, stdout=out,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)
            except OSError as error:
                out.write(f"cannot start {self.command[0]}: {error.strerror}\n".encode())
                return Attempt(number, None, 0.0, log)
            attempt = Attempt(number, None, 0.0, log)
            signal_at: Optional[float] = None
            next_beat = started + 30
            while True:
                code = self.process.poll()
                now = time.monotonic()
                if code is not None:
                    break
                if stop_after_checkpoint and attempt.signalled_after is None:
                    if attempt.first_checkpoint_after is None and store.latest() is not None:
                        attempt.first_checkpoint_after = now - started
                        delay = DEFAULT_SIGNAL_DELAY if signal_delay is None else signal_delay
                        signal_at = now + delay
                        self.progress(f"    first complete checkpoint after {attempt.first_checkpoint_after:.1f} s; "
                                      f"SIGTERM in {delay:.1f} s")
                    if (signal_at is not None and now >= signal_at) or now - started >= signal_after:
                        self.process.send_signal(signal.SIGTERM)  # ECS signals the container's first process only
                        attempt.signalled_after = now - started
                        attempt.signalled_at = _now_iso()
                        self.progress(f"    SIGTERM sent after {attempt.signalled_after:.1f} s (a simulated Spot "
                                      f"reclaim); SIGKILL after {stop_timeout:g} s more")
                if attempt.signalled_after is not None and now - started - attempt.signalled_after >= stop_timeout:
                    self._kill()
                    attempt.killed = True
                    break
                if now - started >= attempt_timeout:
                    self._kill()
                    attempt.timed_out = True
                    break
                if now >= next_beat:
                    self.progress(f"    attempt {number} running ({now - started:.0f} s)")
                    next_beat = now + 30
                time.sleep(POLL_SECONDS)
            code = self.process.wait()
            self._kill()  # anything the job left in its group (data-loader workers)
            ended = time.monotonic()
        attempt.exit_code = code
        attempt.seconds = ended - started
        if attempt.signalled_after is not None:
            attempt.exited_after_signal = attempt.seconds - attempt.signalled_after
        self.process = None
        return attempt

    def _kill(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> None:
        """Ends what runs now (Ctrl-C of the rehearsal)."""
        self._kill()


def _record(uri: str) -> Optional[dict]:
    try:
        text = Location(uri).read(RECORD_NAME)
        return json.loads(text) if text else None
    except (ValueError, OSError):
        return None


def _exit_meaning(code: Optional[int]) -> str:
    if code is None:
        return "it did not start"
    if code < 0:
        try:
            return f"it died of {signal.Signals(-code).name} (no handler: it wrote nothing and exited no code of its own)"
        except ValueError:
            return f"it died of signal {-code}"
    if code == 0:
        return "exit 0: AWS Batch records it as SUCCEEDED and never runs it again, unfinished"
    if code == STOPPED_EXIT_CODE:
        return "exit 143"
    if code == HEALTH_STOPPED_EXIT_CODE:
        return (f"exit {code}: a training-health rule stopped it (the run's record names the rule; {HEALTH_DOCS}); "
                "the queue never retries it, so the job would end FAILED here")
    return f"exit {code}: the queue retries exit 143 only, so the job would end FAILED here"


def rehearse(command: Sequence[str], *, workdir: Optional[str] = None, checkpoints: Optional[str] = None,
             datasets: Optional[str] = None, stop_timeout: float = DEFAULT_STOP_TIMEOUT,
             signal_after: float = DEFAULT_SIGNAL_AFTER, attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
             signal_delay: Optional[float] = None, exact: bool = False, env: Optional[Mapping[str, str]] = None,
             progress: Callable[[str], None] = lambda line: None, runners: Optional[list] = None) -> Rehearsal:
    """Runs the rehearsal (see the module docstring) and returns its checks, then the health rules' verdicts the run
    recorded. ``runners``: where the runner in use is put, so that a caller can stop it on Ctrl-C."""
    result = _rehearse(command, workdir=workdir, checkpoints=checkpoints, datasets=datasets, stop_timeout=stop_timeout,
                       signal_after=signal_after, attempt_timeout=attempt_timeout, signal_delay=signal_delay,
                       exact=exact, env=env, progress=progress, runners=runners)
    interrupted_uri = checkpoints or str(Path(result.workdir) / "interrupted")
    result.health, result.warnings = health_report(_record(interrupted_uri), os.environ if env is None else env)
    return result


def _rehearse(command: Sequence[str], *, workdir: Optional[str], checkpoints: Optional[str], datasets: Optional[str],
              stop_timeout: float, signal_after: float, attempt_timeout: float, signal_delay: Optional[float],
              exact: bool, env: Optional[Mapping[str, str]], progress: Callable[[str], None],
              runners: Optional[list]) -> Rehearsal:
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ml-platform-rehearsal-"))
    work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    interrupted_uri = checkpoints or str(work / "interrupted")
    base = dict(os.environ if env is None else env)
    base.pop("MLFLOW_TRACKING_URI", None)  # a rehearsal's runs stay in its work directory, never in a team's store
    contract = {"ML_PLATFORM_STOP_FILE": str(work / "stop-requested"), "ML_PLATFORM_JOB_PID_FILE": str(work / "job.pid"),
                "ML_PLATFORM_STOP_TIMEOUT_SECONDS": f"{stop_timeout:g}", "ML_PLATFORM_REHEARSAL": "1",
                # One seed for every run of the rehearsal, for a job that names none (TrainingJob.start reads it).
                "ML_PLATFORM_SEED": base.get("ML_PLATFORM_SEED") or str(random.randrange(2 ** 31)),
                "PYTHONUNBUFFERED": "1"}
    if datasets:
        contract["ML_PLATFORM_DATASETS_URI"] = datasets
    result = Rehearsal(list(command), str(work))
    shown = progress
    progress = lambda text: [shown(line) for line in _wrap(text, 100, "      ")]  # noqa: E731
    runner = Runner(command, {**base, **contract}, work, progress)
    if runners is not None:
        runners.append(runner)
    checks = result.checks
    job_env = {"ML_PLATFORM_CHECKPOINT_URI": interrupted_uri, "ML_PLATFORM_JOB_NAME": f"rehearsal-{stamp}"}

    progress(f"==> attempt 1: {' '.join(command)} (output: {work / 'attempt-1.log'})")
    first = runner.run(1, {**job_env, "AWS_BATCH_JOB_ATTEMPT": "1"}, checkpoint_uri=interrupted_uri,
                       stop_after_checkpoint=True, signal_after=signal_after, stop_timeout=stop_timeout,
                       attempt_timeout=attempt_timeout, signal_delay=signal_delay)
    store = CheckpointStore(Location(interrupted_uri))
    if first.signalled_after is None:
        if first.exit_code is None:
            checks.append(Check("attempt 1 started", False, f"cannot run {command[0]}: {first.tail(1)}",
                                "check the command after --"))
        elif first.exit_code == 0:
            checks.append(Check("attempt 1 ran until the stop", False, "it finished before it could be stopped "
                                f"({first.seconds:.1f} s, no complete checkpoint until then)" if store.latest() is None
                                else f"it finished {first.seconds:.1f} s in, before the signal",
                                "give it more work (epochs or steps), so that it runs past its first checkpoint"))
        elif first.exit_code == HEALTH_STOPPED_EXIT_CODE:
            checks.append(health_stop_check(_record(interrupted_uri), first))
        else:
            checks.append(Check("attempt 1 ran until the stop", False, f"it failed before the stop, {_exit_meaning(first.exit_code)}: "
                                f"{first.tail()}", f"read its output: {first.log}"))
        return result

    limit = f"within the stop timeout ({stop_timeout:g} s)"
    early = _record(interrupted_uri)
    if early is not None and early.get("status") == "FINISHED":
        checks.append(Check("attempt 1 ran until the stop", False, f"it finished training before the signal landed "
                            f"({first.signalled_after:.1f} s in; the first complete checkpoint came after "
                            f"{first.first_checkpoint_after or 0:.1f} s)",
                            "give it more work (epochs or steps), so that it runs well past its first checkpoint"))
        return result
    if first.killed:
        checks.append(Check(f"exited 143 {limit}", False, f"still running {stop_timeout:g} s after SIGTERM: killed",
                            f"save faster or more often, or raise the queue's stop_timeout ({DOCS}#stopping-in-time)"))
    elif first.exit_code == STOPPED_EXIT_CODE:
        checks.append(Check(f"exited 143 {limit}", True, f"{first.exited_after_signal:.1f} s after SIGTERM"))
    elif first.exit_code == HEALTH_STOPPED_EXIT_CODE:  # a rule fired at the step the stop came to
        checks.append(health_stop_check(_record(interrupted_uri), first))
    else:
        checks.append(Check(f"exited 143 {limit}", False, _exit_meaning(first.exit_code),
                            f"stop with a checkpoint and exit 143 on SIGTERM: TrainingJob.start installs it ({DOCS})"))

    record = _record(interrupted_uri)
    checks.append(_stop_checkpoint(store, record, first, interrupted_uri))
    if first.exit_code == STOPPED_EXIT_CODE:
        progress(f"==> attempt 2 (the queue's retry): output {work / 'attempt-2.log'}")
        second = runner.run(2, {**job_env, "AWS_BATCH_JOB_ATTEMPT": "2"}, checkpoint_uri=interrupted_uri,
                            stop_after_checkpoint=False, signal_after=signal_after, stop_timeout=stop_timeout,
                            attempt_timeout=attempt_timeout)
        record = _record(interrupted_uri)
        attempts = (record or {}).get("passport", {}).get("attempts", [])
        restored = attempts[1].get("restored_from") if len(attempts) > 1 else None
        if restored:
            checks.append(Check("the retry resumed (did not start over)", True, f"from step {restored.get('step')}"))
        else:
            checks.append(Check("the retry resumed (did not start over)", False,
                                "attempt 2 recorded no restore: it started from the beginning",
                                f"restore the newest checkpoint (job.track, or the framework callback) ({DOCS})"))
        if second.exit_code == 0:
            checks.append(Check("finished with exit 0", True, f"attempt 2 took {second.seconds:.1f} s"))
        elif second.timed_out:
            checks.append(Check("finished with exit 0", False, f"attempt 2 still ran after {attempt_timeout:g} s",
                                "raise --attempt-timeout, or give the rehearsal a shorter job"))
        elif second.exit_code == HEALTH_STOPPED_EXIT_CODE:
            checks.append(health_stop_check(record, second))
        else:
            checks.append(Check("finished with exit 0", False, f"attempt 2: {_exit_meaning(second.exit_code)}: "
                                f"{second.tail()}", f"read its output: {second.log}"))
    else:
        checks.append(Check("the retry resumed (did not start over)", None, "no retry: the queue would not retry it"))

    if record is None:
        checks.append(Check("one run recorded", False, f"no run record ({RECORD_NAME}) under {interrupted_uri}",
                            f"start the run with TrainingJob.start or TrackedRun.start ({DOCS})"))
    else:
        attempts = record.get("passport", {}).get("attempts", [])
        outcomes = [a.get("outcome") for a in attempts]
        if record.get("status") == "FINISHED" and outcomes == ["stopped", "finished"]:
            checks.append(Check("one run recorded", True, f"run {record['run_id']}: 2 attempts, stopped then finished"))
        elif record.get("status") == "FAILED" and outcomes and outcomes[-1] == "health_stopped" and \
                set(outcomes[:-1]) <= {"stopped"}:  # the stop is the FAIL above; its record is right
            checks.append(Check("one run recorded", True, f"run {record['run_id']}: {len(outcomes)} attempt(s), "
                                f"{', '.join(outcomes)}: the health stop above, recorded"))
        else:
            checks.append(Check("one run recorded", False, f"run {record.get('run_id')}: status {record.get('status')}, "
                                f"attempts {', '.join(map(str, outcomes)) or 'none'} (expected: stopped, finished)",
                                "record the stop and the finish (job.finish; the callbacks do both)"))

    if not exact:
        checks.append(Check("the final state equals an uninterrupted run's", None, "not checked (--exact runs the job a "
                            "third time, uninterrupted, to compare)"))
    elif record is None or record.get("status") != "FINISHED" or first.exit_code != STOPPED_EXIT_CODE:
        checks.append(Check("the final state equals an uninterrupted run's", None, "not checked: the interrupted run "
                            "did not finish"))
    else:
        clean_uri = checkpoints.rstrip("/") + "-uninterrupted/" if checkpoints else str(work / "uninterrupted")
        progress(f"==> once more, uninterrupted (--exact): output {work / 'attempt-3.log'}")
        clean = runner.run(3, {"ML_PLATFORM_CHECKPOINT_URI": clean_uri, "ML_PLATFORM_JOB_NAME": f"rehearsal-{stamp}-clean",
                               "AWS_BATCH_JOB_ATTEMPT": "1"}, checkpoint_uri=clean_uri, stop_after_checkpoint=False,
                           signal_after=signal_after, stop_timeout=stop_timeout, attempt_timeout=attempt_timeout)

        def once_more() -> Optional[Mapping[str, Any]]:
            uri = clean_uri.rstrip("/") + "-again/" if clean_uri.startswith("s3://") else clean_uri + "-again"
            progress(f"==> the weights differ: a second uninterrupted run tells whether the job is deterministic "
                     f"(output: {work / 'attempt-4.log'})")
            runner.run(4, {"ML_PLATFORM_CHECKPOINT_URI": uri, "ML_PLATFORM_JOB_NAME": f"rehearsal-{stamp}-again",
                           "AWS_BATCH_JOB_ATTEMPT": "1"}, checkpoint_uri=uri, stop_after_checkpoint=False,
                       signal_after=signal_after, stop_timeout=stop_timeout, attempt_timeout=attempt_timeout)
            return _record(uri)
        checks.append(_exactness(record, _record(clean_uri), clean, once_more))
    if record is not None:
        progress(f"==> the run it recorded: {Location(interrupted_uri).uri}{RECORD_NAME}")
    return result


def _now_iso() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _stop_checkpoint(store: CheckpointStore, record: Optional[Mapping[str, Any]], first: Attempt, uri: str) -> Check:
    """A checkpoint of the step the stop came at: what the record says of the stop (``saved_at_stop``), else a
    checkpoint completed after the signal. A newer checkpoint from before the signal is not enough: the steps since it
    would be lost on every reclaim (a SIGTERM save that never fires looks like this)."""
    name = "a checkpoint of the step it stopped at"
    latest = store.latest()
    if latest is None:
        return Check(name, False, f"no complete checkpoint under {uri} (a folder checkpoints/step-N/ with its "
                     "COMPLETE.json)", f"save through the job side's checkpoints ({DOCS}#checkpoints)")
    stopped = ((record or {}).get("passport", {}).get("attempts") or [{}])[0]
    if stopped.get("saved_at_stop") is True:
        return Check(name, True, f"step {latest.step}")
    if stopped.get("saved_at_stop") is False:
        return Check(name, False, f"none: the retry resumes from step {latest.step}, and the steps since are lost "
                     f"({stopped.get('reason') or 'no reason recorded'})",
                     f"save faster or more often, or raise the queue's stop_timeout ({DOCS}#stopping-in-time)")
    if first.signalled_at and latest.saved_at and latest.saved_at >= first.signalled_at[:len(latest.saved_at)]:
        return Check(name, True, f"step {latest.step}, written after the signal")
    return Check(name, False, f"none after the signal: the newest is step {latest.step}, saved before it (the steps "
                 "since would be lost)", f"save a checkpoint when SIGTERM comes ({DOCS}#stopping-in-time)")


def _exactness(interrupted: Mapping[str, Any], clean: Optional[Mapping[str, Any]], run: Attempt,
               again: Optional[Callable[[], Optional[Mapping[str, Any]]]] = None) -> Check:
    name = "the final state equals an uninterrupted run's"
    if run.exit_code == HEALTH_STOPPED_EXIT_CODE:
        stopped = health_stop_check(clean, run)
        return Check(name, False, f"the uninterrupted run did not finish: {stopped.detail}", stopped.fix, stopped.docs)
    if run.exit_code != 0 or clean is None:
        return Check(name, False, f"the uninterrupted run did not finish: {_exit_meaning(run.exit_code)}: {run.tail()}",
                     f"read its output: {run.log}")
    a, b = interrupted.get("final_state_sha256"), clean.get("final_state_sha256")
    if not a or not b:
        return Check(name, None, "not checked: the run records no final weights (job.finish(model=model))")
    if a == b:
        return Check(name, True, f"the same weights, sha256 {a[:16]}...")
    fix = f"something the checkpoint lacks changes the run: see {DOCS}#what-exactness-needs"
    deterministic = (interrupted.get("passport", {}).get("seeds") or {}).get("deterministic")
    if deterministic:
        return Check(name, False, f"the weights differ ({a[:12]}... vs {b[:12]}...), with deterministic algorithms on",
                     fix)
    # Without deterministic algorithms the difference may be the kernels': one more uninterrupted run tells.
    third = again() if again else None
    c = (third or {}).get("final_state_sha256")
    if not c:
        return Check(name, None, f"not checked: the weights differ ({a[:12]}... vs {b[:12]}...) and a second "
                     "uninterrupted run did not finish to tell whether the job is deterministic")
    if c == b:
        return Check(name, False, f"the weights differ ({a[:12]}... vs {b[:12]}...), and two uninterrupted runs agree "
                     "with each other: the stop and resume changed the result", fix)
    return Check(name, None, f"not checked: two uninterrupted runs differ too ({b[:12]}... vs {c[:12]}...): the job "
                 "is non-deterministic (TrainingJob.start(deterministic=True))")


# --- the training-health rules (health.py) as the run recorded them ----------------------------------------------

_RANKS = {"fired": 3, "ok": 2, "not judged": 1, "off": 0}
_GAP = re.compile(r"longest gap ([0-9.]+) s of ([0-9.]+) s")


def _kind(text: Any) -> str:
    """A rule's verdict as one of fired, ok, off, not judged (anything else the record says counts as not judged)."""
    text = str(text)
    if text.startswith("fired"):
        return "fired"
    if text.startswith("ok"):
        return "ok"
    return "off" if text == "off" else "not judged"


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_values(values: Any) -> str:
    """A verdict's values as ``name value, ...`` (numbers to 4 significant digits)."""
    if not isinstance(values, Mapping) or not values:
        return "none recorded"
    shown = []
    for key, value in values.items():
        number = _number(value)
        shown.append(f"{key} {value}" if number is None or isinstance(value, int) else f"{key} {number:.4g}")
    return ", ".join(shown)


def _stopped_attempt(record: Optional[Mapping[str, Any]], number: int) -> tuple[Optional[dict], Optional[dict]]:
    """(the record's attempt ``number`` when a health rule stopped it, its verdict): the attempt's ``health_stop``,
    else the last health-stopped attempt's, else the run's ``health.stop``; (None, None) when the record has none."""
    if not isinstance(record, Mapping):
        return None, None
    attempts = [a for a in ((record.get("passport") or {}).get("attempts") or []) if isinstance(a, Mapping)]
    stopped = [a for a in attempts if a.get("outcome") == "health_stopped" and isinstance(a.get("health_stop"), Mapping)]
    chosen = next((a for a in stopped if a.get("number") == number), stopped[-1] if stopped else None)
    if chosen is not None:
        return dict(chosen), dict(chosen["health_stop"])
    health = record.get("health")
    stop = health.get("stop") if isinstance(health, Mapping) else None
    return None, (dict(stop) if isinstance(stop, Mapping) else None)


def health_stop_check(record: Optional[Mapping[str, Any]], attempt: Attempt) -> Check:
    """The FAIL of an attempt that exited 85: the rule, the step, its message and values, the checkpoint, the fix."""
    recorded, verdict = _stopped_attempt(record, attempt.number)
    if verdict is None:
        return Check(HEALTH_CHECK, False, f"attempt {attempt.number}: exit {HEALTH_STOPPED_EXIT_CODE}, the health "
                     "rules' exit code, but the run records no health stop (does the script exit 85 itself?): "
                     f"{attempt.tail()}", f"read its output: {attempt.log}", HEALTH_DOCS)
    rule, step = verdict.get("rule"), verdict.get("step")
    saved = (recorded or {}).get("saved_at_stop")
    kept = ("; the checkpoint of that step is written (for inspection: a resume starts from the good one before it)"
            if saved is True
            else "; no checkpoint of that step (a NaN state or a stuck loop is never saved: the newest complete one "
                 "is the last good one)" if saved is False else "")
    detail = (f"attempt {attempt.number}: the rule {rule} stopped it at step {step} (exit "
              f"{HEALTH_STOPPED_EXIT_CODE}, which the queue never retries): {verdict.get('message') or 'no message'}; "
              f"values: {format_values(verdict.get('values'))}{kept}")
    fix = verdict.get("fix") or FIXES.get(str(rule), "")
    return Check(HEALTH_CHECK, False, detail, f"{fix} ({HEALTH_DOCS})" if fix else f"read {HEALTH_DOCS}", HEALTH_DOCS)


def health_report(record: Optional[Mapping[str, Any]], env: Optional[Mapping[str, str]] = None
                  ) -> tuple[dict, list[str]]:
    """(the health rules as the run recorded them, warnings). The first: ``recorded`` (False: ``note`` says why),
    ``mode``, ``check_every``, ``rules`` (each rule's verdict: the last attempt's, with an earlier attempt's where
    that one judged more: "ok (60 checks) (attempt 1); attempt 2: not judged: ..."), ``stop`` (the verdict of a rule
    that stopped the run, or None), ``longest_gap_seconds`` and ``stall_seconds`` (the stall rule's threshold). The
    warnings: a rule that fired with action warn (its fix), and a longest gap over half the stall threshold."""
    env = {} if env is None else env
    empty = {"recorded": False, "note": None, "mode": None, "check_every": None, "rules": {}, "stop": None,
             "longest_gap_seconds": None, "stall_seconds": None}
    if not isinstance(record, Mapping):
        return {**empty, "note": "no run record: nothing to judge"}, []
    health = record.get("health")
    if health is None:
        return {**empty, "note": "not recorded: the job ran without TrainingJob or a framework callback, which run "
                                 f"the rules ({HEALTH_DOCS})"}, []
    if not isinstance(health, Mapping) or not isinstance(health.get("rules", {}), Mapping):
        what = type(health.get("rules") if isinstance(health, Mapping) else health).__name__
        return {**empty, "note": f"unreadable: the record's health{'.rules' if isinstance(health, Mapping) else ''} "
                                 f"is a {what}, not an object"}, []
    if health.get("error") and not health.get("rules"):
        return {**empty, "note": f"unreadable: the job could not record the rules' verdicts ({health['error']})"}, []
    attempts = [a for a in ((record.get("passport") or {}).get("attempts") or []) if isinstance(a, Mapping)]
    judged = [(a.get("number", i + 1), (a.get("health") or {}).get("rules")) for i, a in enumerate(attempts)
              if isinstance(a.get("health"), Mapping)]
    judged = [(number, rules) for number, rules in judged if isinstance(rules, Mapping)]
    final = dict(health.get("rules") or {})
    last = judged[-1][0] if judged else None
    rules: dict[str, str] = {}
    for rule in [*RULES, *(name for name in final if name not in RULES)]:
        mine = final.get(rule)
        earlier = [(number, said[rule]) for number, said in judged[:-1] if rule in said]
        best = max(earlier, key=lambda item: _RANKS[_kind(item[1])], default=None)
        if mine is None and best is None:
            continue
        if mine is None:
            rules[rule] = f"{best[1]} (attempt {best[0]})"
        elif best is not None and _RANKS[_kind(best[1])] > _RANKS[_kind(mine)]:
            rules[rule] = f"{best[1]} (attempt {best[0]}); attempt {last}: {mine}"
        else:
            rules[rule] = str(mine)
    gaps = [_number(health.get("longest_gap_seconds"))]
    stall = _number(health.get("stall_seconds"))
    for text in [str(final.get("stalled", ""))] + [str(said.get("stalled", "")) for _, said in judged]:
        found = _GAP.search(text)
        if found:
            gaps.append(float(found.group(1)))
            stall = stall or float(found.group(2))
    if stall is None:
        try:
            stall = float(env.get(STALL_ENV) or STALL_SECONDS)
        except ValueError:
            stall = STALL_SECONDS
    gap = max((g for g in gaps if g is not None), default=None)
    stop = health.get("stop") if isinstance(health.get("stop"), Mapping) else _stopped_attempt(record, 0)[1]
    report = {**empty, "recorded": True, "mode": health.get("mode"), "check_every": health.get("check_every"),
              "rules": rules, "stop": stop, "longest_gap_seconds": gap, "stall_seconds": stall}
    warnings = []
    for rule, text in rules.items():
        if _kind(text) == "fired" and "(warn)" in text:
            warnings.append(f"health rule {rule} {text}; training went on (warn only). Fix: "
                            f"{FIXES.get(rule, 'read ' + HEALTH_DOCS)}")
    if gap is not None and gap > stall / 2 and (stop or {}).get("rule") != "stalled":
        warnings.append(f"the longest time without progress was {gap:.0f} s, over half the stall rule's {stall:.0f} s: "
                        "a real run's slower data or longer validation could be stopped (exit 85); call "
                        f"job.progress() inside long validations, or raise {STALL_ENV} ({HEALTH_DOCS})")
    return report, warnings


def health_lines(health: Optional[Mapping[str, Any]], width: int = 100) -> list[str]:
    """The section of the rules' verdicts: one line per rule, "not judged" as such."""
    if not health:
        return []
    if not health.get("recorded"):
        return _wrap(f"  ----  health rules: {health.get('note')}", width, " " * 10)
    how = [f"mode {health['mode']}" if health.get("mode") else "",
           f"a check every {health['check_every']} steps" if health.get("check_every") else ""]
    how_text = "; ".join(part for part in how if part)
    lines = _wrap(f"  health rules, as the run recorded them ({how_text + '; ' if how_text else ''}{HEALTH_DOCS}):",
                  width, " " * 10)
    for rule, text in (health.get("rules") or {}).items():
        lines += _wrap(f"{' ' * 10}{rule:<20} {text}", width, " " * 31)
    if not health.get("rules"):
        lines.append(f"{' ' * 10}none recorded")
    return lines


def format_lines(result: Rehearsal, width: int = 100) -> list[str]:
    """One line per check (its detail and fix wrapped to ``width``), the health rules' verdicts and the warnings,
    then the verdict."""
    lines = []
    for check in result.checks:
        lines += _wrap(f"  {check.label}  {check.name}: {check.detail}", width, " " * 10)
        if check.passed is False and check.fix:
            lines += _wrap(f"{' ' * 10}fix: {check.fix}", width, " " * 15)
    lines += health_lines(result.health, width)
    for warning in result.warnings:
        lines += _wrap(f"  WARN  {warning}", width, " " * 10)
    lines.append(result.verdict)
    return lines


def _wrap(text: str, width: int, indent: str) -> list[str]:
    """``text`` in lines of at most ``width`` columns, its own leading spaces kept, ``indent`` before the later ones."""
    lines, line = [], " " * (len(text) - len(text.lstrip(" ")))
    for word in text.lstrip(" ").split(" "):
        if line.strip() and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = indent + word
        else:
            line = f"{line} {word}" if line.strip() else line + word
    lines.append(line)
    return [entry[:width] for entry in lines]
