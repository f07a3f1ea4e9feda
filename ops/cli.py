"""What every operator command shares on its command line: its real name in usage lines and one-line errors."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Callable, NoReturn

from botocore.exceptions import BotoCoreError, ClientError
# Figures on the command line are checked for their range as they are parsed, in one place for the app's commands
# and the library's (python -m ml_platform_constructs): the argument, the value, the range and an example, exit 2.
# The exit codes (EXIT_*: 0 done or decided for, 1 error, 2 bad argument, 3 decided against, 4 not judged) are
# defined there too, once for both.
from ml_platform_constructs.operations.cli import (  # noqa: F401 - the app's commands take them from here
    EXIT_DECIDED_AGAINST,
    EXIT_ERROR,
    EXIT_NOT_JUDGED,
    EXIT_OK,
    EXIT_USAGE,
    GIB_VOLUME,
    INSTANCES,
    MONTH_HOURS,
    SPEND_USD,
    DecidedAgainst,
    add_drift_figures,
    add_job_figures,
    add_size_gib,
    add_what_if_figures,
    COLUMNS,
    bounded,
    fit,
    refusals_are_bad_arguments,
    usage_error,
    verdict_exit,
    verdicts,
)


def read_text(path: Path, what: str, expected: str) -> str:
    """A text file's contents, or one line that names it and what it should be: ``what`` (e.g. "--labels FILE"), and
    ``expected`` (e.g. "JSON Lines, one label a line"), when it is not UTF-8 text (a binary file) or cannot be read
    (a directory, no permission)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SystemExit(f"error: {what} {path} is not UTF-8 text (byte {error.start} is not: a binary file?): give "
                         f"{expected}") from None
    except OSError as error:
        raise SystemExit(f"error: {what} {path} cannot be read ({error.strerror or error}): give {expected}") from None


def add_seed(parser: argparse.ArgumentParser, default: int = 2026) -> None:
    """A simulation's ``--seed`` (the benches'): a whole number from 0 to 2^31."""
    parser.add_argument("--seed", type=bounded(0, 2**31, "the random seed", example=f"--seed {default}", integer=True),
                        default=default, help=f"the random seed (default {default})")


class Parser(argparse.ArgumentParser):
    """argparse with the platform's conventions. ``prog`` is the command as typed (``./platform job``; a
    subcommand's usage reads ``./platform job submit``), and a bad argument is one line that names the command
    and where its usage is, not argparse's usage block followed by the error."""

    def __init__(self, prog: str, description: str | None = None, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(prog=prog, description=description, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (usage: {self.prog} --help)\n")


def aws_errors_in_one_line(main: Callable[..., int]) -> Callable[..., int]:
    """A command's entry point whose AWS errors (access denied, throttling, an expired token) end it with one line
    naming the call and AWS's answer, not a botocore traceback."""

    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except ClientError as error:
            details = error.response.get("Error", {})
            hint = " (the credentials lack that permission)" if "AccessDenied" in details.get("Code", "") else ""
            raise SystemExit(f"error: AWS refused {error.operation_name}: {details.get('Code', 'error')}: "
                             f"{' '.join(str(details.get('Message', '')).split())}{hint}") from None
        except BotoCoreError as error:
            raise SystemExit(f"error: {' '.join(str(error).split())}") from None

    return run
