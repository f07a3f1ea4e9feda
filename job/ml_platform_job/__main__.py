"""The job side's command line (or ``ml-platform-job``):

    python -m ml_platform_job rehearse [options] -- COMMAND...   prove that a job survives a Spot reclaim
    python -m ml_platform_job launch -- torchrun ...               a job of several processes as the container's first

Runs without the CDK or Node.js: in a training image, on a laptop, in CI. Every error is one line saying what to do.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from typing import Optional, Sequence

from . import launch as launcher
from . import rehearse as rehearsal

USAGE = "python -m ml_platform_job rehearse [options] -- COMMAND..."
LAUNCH_USAGE = "python -m ml_platform_job launch -- COMMAND..."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, never argparse's usage block
        print(f"error: {message} (usage: {USAGE}; --help lists the options)", file=sys.stderr)
        raise SystemExit(2)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: more than 0 seconds")
    return value


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m ml_platform_job", description="The job side of the ML platform.")
    commands = top.add_subparsers(dest="command", parser_class=_Parser)
    run = commands.add_parser("rehearse", help="prove that a job survives a Spot reclaim, before one does",
                              description=rehearsal.__doc__.split("\n\n")[0], usage=USAGE)
    run.add_argument("--exact", action="store_true", help="run it a third time, uninterrupted, and compare the final "
                     "weights with the interrupted run's")
    run.add_argument("--datasets", metavar="DIR", help="ML_PLATFORM_DATASETS_URI for the job (a directory or s3://)")
    run.add_argument("--checkpoints", metavar="URI", help="ML_PLATFORM_CHECKPOINT_URI (default: a fresh directory "
                     "under the work directory); an s3:// prefix needs its credentials in the environment")
    run.add_argument("--workdir", metavar="DIR", help="where the attempts' output and checkpoints go (default: a "
                     "new temporary directory, named in the output)")
    run.add_argument("--stop-timeout", type=_positive, default=rehearsal.DEFAULT_STOP_TIMEOUT, metavar="S",
                     help="SIGTERM to SIGKILL, as the queue's (default 30: ECS's; a TrainingQueue's is 110)")
    run.add_argument("--signal-after", type=_positive, default=rehearsal.DEFAULT_SIGNAL_AFTER, metavar="S",
                     help="SIGTERM after this long when no complete checkpoint came (default 300)")
    run.add_argument("--signal-delay", type=_positive, default=rehearsal.DEFAULT_SIGNAL_DELAY, metavar="S",
                     help="SIGTERM this long after the first complete checkpoint (default 0.5)")
    run.add_argument("--attempt-timeout", type=_positive, default=rehearsal.DEFAULT_ATTEMPT_TIMEOUT, metavar="S",
                     help="an attempt running longer is ended and fails the rehearsal (default 3600)")
    run.add_argument("--json", action="store_true", help="the checks as JSON on stdout (progress goes to stderr)")
    run.add_argument("job", nargs=argparse.REMAINDER, help="-- then the job's command")
    launch = commands.add_parser("launch", help="run a job of several processes (torchrun) as the container's first "
                                 "process: SIGTERM passed on, exit 143 when stopped", usage=LAUNCH_USAGE,
                                 description=launcher.__doc__.split("\n\n")[0])
    launch.add_argument("job", nargs=argparse.REMAINDER, help="-- then the command, e.g. torchrun ... train.py")
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command not in ("rehearse", "launch"):
        print(f"error: a command is needed (usage: {USAGE}, or {LAUNCH_USAGE})", file=sys.stderr)
        return 2
    command = args.job[1:] if args.job[:1] == ["--"] else args.job
    if args.command == "launch":
        if not command:
            print(f"error: no command: put it after -- (usage: {LAUNCH_USAGE})", file=sys.stderr)
            return 2
        return launcher.launch(command)
    if not command:
        print(f"error: no job command: put it after -- (usage: {USAGE})", file=sys.stderr)
        return 2
    program = command[0]
    if shutil.which(program) is None:  # a rehearsal that cannot run is an error (1), not a FAIL of the job (3)
        print(f"error: rehearse: cannot start {program}: no such program, or not executable: give the command that "
              "runs your job after --, e.g. -- python train.py", file=sys.stderr)
        return 1
    out = sys.stderr if args.json else sys.stdout
    runners: list = []

    def interrupted(signum: int, frame: object) -> None:
        for runner in runners:
            runner.stop()
        print(f"interrupted ({signal.Signals(signum).name}): the job's processes are ended; run it again to start over",
              file=sys.stderr)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        result = rehearsal.rehearse(command, workdir=args.workdir, checkpoints=args.checkpoints,
                                    datasets=args.datasets, stop_timeout=args.stop_timeout,
                                    signal_after=args.signal_after, attempt_timeout=args.attempt_timeout,
                                    signal_delay=args.signal_delay,
                                    exact=args.exact, progress=lambda line: print(line, file=out, flush=True),
                                    runners=runners)
        if args.json:
            print(json.dumps(result.to_dict(), indent=1))
        else:
            for line in rehearsal.format_lines(result):
                print(line)
        sys.stdout.flush()
    except BrokenPipeError:  # | head: the reader has gone; so has the point of saying more
        sys.stderr.close()
        return rehearsal.EXIT_PASS if "result" in locals() and result.passed else rehearsal.EXIT_FAIL
    return rehearsal.EXIT_PASS if result.passed else rehearsal.EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
