"""Operations for a team that has only the library (the platform app has ./platform for the same jobs).

  python -m ml_platform_constructs dataset build --runbook NAME --bucket BUCKET --name N --version V
                                   --prefix datasets/N/ --size-gib SIZE
  python -m ml_platform_constructs drift-baseline SAMPLE.csv --endpoint NAME (--bucket BUCKET | --output FILE)
                                   [--exclude COLUMN] [--bins 10] [--max-categories 20]
  python -m ml_platform_constructs budget resume --function NAME
  python -m ml_platform_constructs budget status [--scope account]
  python -m ml_platform_constructs budget what-if --monthly-limit USD [--stop-at-percent 80] [--actual USD]
                                   [--budget-age-hours H] [--running TYPE=COUNT[@HOURS]]...
                                   [--on-demand TYPE=COUNT[@HOURS]]... [--now ISO-8601] [--price-table FILE] [--json]
  python -m ml_platform_constructs job submit QUEUE --image IMAGE --name NAME [--gpus N] [--nodes N|MIN:MAX] -- COMMAND...
  python -m ml_platform_constructs job list QUEUE
  python -m ml_platform_constructs job logs QUEUE JOB_ID
  python -m ml_platform_constructs job cancel QUEUE JOB_ID
  python -m ml_platform_constructs job cost JOB_ID [--json] [--instance-type T --lifecycle spot|on-demand]
  python -m ml_platform_constructs prices refresh --region REGION... --output FILE [--table FILE]
                                   [--no-spot-advisor]

Each takes --region, before or after the command (default: AWS_DEFAULT_REGION or the AWS CLI profile's). The
names come from the constructs' attributes, which a team exports with CfnOutputs: DatasetSnapshotBuilder.runbook_name,
DatasetBucket.bucket_name, MonitoredEndpoint.endpoint_name, BudgetGuard.stop_function.function_name,
BudgetGuard.budget_scope, TrainingQueue.queue_name (QUEUE).
Credentials come from the usual AWS chain; budget what-if needs none (--region names the prices). Needs boto3 and
nothing of the CDK: no aws-cdk-lib import, no Node.js. Every error is one line that says what to do: exit 1, or 2
for a bad argument.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import getpass
import json
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Optional

from ..runtime.handlers import budget_guard
from ..runtime.handlers.budget_guard import ACCOUNT_SCOPE
from ..runtime.handlers.pending_jobs import PendingJobs
from ..runtime.decisions.capture import json_type
from ..runtime.decisions.drift import build_baseline


def read_rows(path: Path) -> tuple[list[str], Iterator[dict]]:
    """A CSV with a header, or JSON Lines (the first record's keys are the columns)."""
    if path.suffix == ".jsonl":
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return (list(lines[0]) if lines and isinstance(lines[0], dict) else []), iter(lines)
    handle = path.open(newline="", encoding="utf-8")
    reader = csv.DictReader(handle)
    return list(reader.fieldnames or []), reader


MAX_ROWS_NAMED = 3  # of a sample's rows it refuses, the first few are named in its one line


def _row_problem(row: Any, columns: list[str], jsonl: bool) -> Optional[str]:
    """Why a sample's row is not one value per column, or None. A CSV row of another width (csv.DictReader puts
    extra values under None and leaves missing ones None) is refused rather than guessed at: which value is
    missing cannot be told. A JSON record names its values: a missing key is a missing value, but a key the
    first record lacks would be dropped silently, and an object or list is no feature value."""
    if jsonl:
        if not isinstance(row, dict):
            return f"a JSON {json_type(row)}, not an object"
        extra = [str(key) for key in row if key not in columns]
        if extra:
            return f"has {', '.join(extra[:3])}, which the first record lacks"
        nested = [key for key, value in row.items() if isinstance(value, (dict, list))]
        return f"{nested[0]} holds a JSON {json_type(row[nested[0]])}, not a number or a category" if nested \
            else None
    width = len(columns) + len(row.get(None) or []) - sum(1 for k, v in row.items() if k is not None and v is None)
    if width != len(columns):
        return f"{width} values, the header {len(columns)} columns"
    return "a NUL byte (a binary file?)" if any("\x00" in value for value in row.values() if value) else None


def sample_rows(sample: Path) -> tuple[list[str], list[dict]]:
    """The columns and rows of a drift-baseline sample, or one line that says what is wrong and what to give: not
    text, not JSON Lines, unreadable, or rows that are not one value per column (each named, up to a few)."""
    expected = "a CSV with a header, or JSON Lines, of training rows"
    jsonl = sample.suffix == ".jsonl"
    problems: list[str] = []
    rows: list[dict] = []
    try:
        columns, reader = read_rows(sample)
        for number, row in enumerate(reader, start=1):
            problem = _row_problem(row, columns, jsonl)
            if problem is None:
                rows.append(row)
            else:
                where = f"record {number}" if jsonl else f"row {number} (line {reader.line_num})"  # type: ignore
                problems.append(f"{where}: {problem}")
    except UnicodeDecodeError as error:
        raise SystemExit(f"error: the sample {sample} is not UTF-8 text (byte {error.start} is not: a binary file?): "
                         f"give {expected}") from None
    except json.JSONDecodeError as error:
        raise SystemExit(f"error: the sample {sample} is not JSON Lines (line {error.lineno}: {error.msg}): give "
                         f"{expected}") from None
    except csv.Error as error:
        raise SystemExit(f"error: the sample {sample} is not a CSV ({_one_line(error)}): give {expected}") from None
    except OSError as error:
        raise SystemExit(f"error: the sample {sample} cannot be read ({error.strerror or error}): give "
                         f"{expected}") from None
    if any("\x00" in str(column) for column in columns):
        problems.insert(0, "the header: a NUL byte (a binary file?)")
    if problems:
        more = f"; {len(problems) - MAX_ROWS_NAMED} more" if len(problems) > MAX_ROWS_NAMED else ""
        kind, rule = (("record", "each a JSON object of the first record's keys, with numbers or categories")
                      if jsonl else ("row", "one value per column of the header, a value that holds a comma quoted"))
        raise SystemExit(f"error: the sample {sample} has {len(problems)} {kind}(s) it cannot use "
                         f"({'; '.join(problems[:MAX_ROWS_NAMED])}{more}): fix or drop them ({rule}), then build the "
                         "baseline again")
    return columns, rows


def check_output(output: Path, flag: str = "--output") -> None:
    """A file a command is to write: one line, before any work, when it is a directory or its directory is missing."""
    if output.is_dir() or not output.parent.is_dir():
        raise SystemExit(f"error: {flag} {output}: "
                         f"{'a directory' if output.is_dir() else 'its directory does not exist'}; give a file "
                         f"path in an existing directory, e.g. {flag} baseline.json")


def write_output(output: Path, body: str, flag: str = "--output") -> None:
    """``body`` into ``output``, or one line when it cannot be written (no permission, a full disk)."""
    try:
        output.write_text(body, encoding="utf-8")
    except OSError as error:
        raise SystemExit(f"error: {flag} {output} cannot be written ({error.strerror or error}): give a file path "
                         f"you can write, e.g. {flag} baseline.json") from None


def baseline_from_sample(sample: Path, exclude: list[str], bins: int, max_categories: int) -> tuple[dict, list[str]]:
    """A drift baseline of every column of ``sample`` but ``exclude`` (the app's and the library's command). A sample
    that is not text, has no rows, rows that are not one value per column, or no column left, and an ``exclude``
    that names no column (the label would become a feature, and every check "not judged"), are one line each."""
    expected = "a CSV with a header, or JSON Lines, of training rows"
    columns, rows = sample_rows(sample)
    unknown = [name for name in exclude if name not in columns]
    if unknown:
        raise SystemExit(f"error: --exclude {', '.join(unknown)}: no such column in {sample} (its columns: "
                         f"{', '.join(columns[:12])}{', ...' if len(columns) > 12 else ''})")
    features = [c for c in columns if c not in exclude]
    if not rows or not features:
        raise SystemExit(f"error: the sample {sample} has {len(rows)} rows and {len(features)} feature columns: give "
                         f"{expected}, with at least one row and one column that is a model input")
    return build_baseline(rows, features, bins=bins, max_categories=max_categories), features


def baseline_key(endpoint_name: str) -> str:
    """Where MonitoredEndpoint's drift check reads the baseline (``MonitoredEndpoint.baseline_key``)."""
    return f"drift/baselines/{endpoint_name}/baseline.json"


def start_dataset_build(ssm: Any, *, runbook: str, bucket: str, name: str, version: str, prefix: str,
                        size_gib: int) -> str:
    """Starts DatasetSnapshotBuilder's runbook; the snapshot id appears at <parameter_prefix>NAME/VERSION/snapshot-id."""
    if not prefix.startswith("datasets/") or not prefix.endswith("/"):
        raise SystemExit(f"error: --prefix {prefix!r}: a prefix under datasets/ ending in '/', e.g. datasets/{name}/")
    if not 1 <= size_gib <= 65536:
        raise SystemExit(f"error: --size-gib {size_gib}: a gp3 size of 1-65536 GiB, at least the dataset's size")
    execution = ssm.start_automation_execution(DocumentName=runbook, Parameters={
        "DatasetName": [name], "Version": [version], "SourceBucket": [bucket], "SourcePrefix": [prefix],
        "SizeGiB": [str(size_gib)]})["AutomationExecutionId"]
    return (f"building {name} {version} from s3://{bucket}/{prefix}: execution {execution}\n"
            f"follow it: aws ssm get-automation-execution --automation-execution-id {execution}")


def resume_budget_stop(lambda_client: Any, function_name: str, operator: str) -> dict:
    """Asks the guard's own function to resume (it has the permissions and the scope)."""
    response = lambda_client.invoke(FunctionName=function_name, Payload=json.dumps(
        {"action": "resume", "operator": operator}).encode())
    payload = json.loads(response["Payload"].read() or b"null")
    if response.get("FunctionError"):
        raise SystemExit(f"error: {function_name} failed: {' '.join(json.dumps(payload).split())}")
    return payload


def budget_status(autoscaling: Any, scope: str, batch: Any = None, ec2: Any = None,
                  pending: Optional[PendingJobs] = None) -> list[str]:
    """Each governed fleet (and, with ``batch``, training queue): running, or stopped with when and why; for a stopped
    queue, with ``ec2``, the instances it still runs and the vCPUs its compute environments still want; with
    ``pending``, the submissions that wait for resume."""
    lines = []
    for group in budget_guard.fleet_groups(autoscaling, scope):
        tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
        stopped = any(p["ProcessName"] == "Launch" for p in group.get("SuspendedProcesses", []))
        state = f"STOPPED ({tags.get(budget_guard.STOP_TAG, 'Launch suspended')})" if stopped else "running"
        lines.append(f"{tags.get(budget_guard.FLEET_TAG)}: {state}, desired {group['DesiredCapacity']}")
    if batch is None:
        return lines or [f"no fleets or queues governed by budget scope {scope!r}"]
    leftovers = {e["queue"]: e for e in budget_guard.queue_leftovers(batch, ec2, scope)} if ec2 is not None else {}
    for queue in budget_guard.governed_queues(batch, scope):
        tags = queue.get("tags", {})
        name = tags[budget_guard.QUEUE_TAG]
        state = f"STOPPED ({tags.get(budget_guard.STOP_TAG, 'disabled')})" if queue["state"] == "DISABLED" else "running"
        lines.append(f"queue {name} ({queue['jobQueueName']}): {state}")
        left = leftovers.pop(name, {})  # once per training queue, under its first job queue
        lines += [f"  still running: {i['id']} ({i['type']}, {i['lifecycle']}, since {i['launched']}): the guard ends "
                  "it once it outlives the grace period after the stop" for i in left.get("instances", [])]
        lines += [f"  compute environment {w['environment']} wants {w['desired_vcpus']} vCPUs"
                  for w in left.get("wanted_vcpus", [])]
        waiting = sorted(e["request"]["jobName"] for e in pending.of_queue(queue["jobQueueName"])) if pending else []
        if waiting:
            lines.append(f"  {len(waiting)} submission(s) wait for resume: {', '.join(waiting)}")
    return lines or [f"no fleets or queues governed by budget scope {scope!r}"]


# The ranges a figure on the command line must be in: nonsense (a negative spend, a million instances) is refused
# before any work, naming the argument, the value, the range and an example. The same bounds as config's.
SPEND_USD = (0, 10_000_000)  # a month's spend or budget; config's monthly_limit_usd is at most 10,000,000
MONTH_HOURS = 744  # 31 days: Budgets' figure and a running instance are at most this month old
INSTANCES = (1, 1000)  # of one type at once; config's max_capacity is at most 1,000
GIB_VOLUME = (1, 65536)  # a gp3 volume


def _figure(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,g}"


def bounded(low: float, high: float, meaning: str, *, example: str, integer: bool = False) -> Callable[[str], Any]:
    """An argparse ``type``: a number from ``low`` to ``high``; anything else is the argument's one-line error with
    its value, what it means, the range and an example (argparse names the argument; exit 2, before any work)."""
    import math

    def parse(text: str) -> Any:
        kind = "a whole number" if integer else "a number"
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}: {meaning}, from {_figure(low)} to "
                                             f"{_figure(high)} (e.g. {example})") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: {meaning}, from {_figure(low)} to "
                                             f"{_figure(high)} (e.g. {example})")
        return value

    parse.__name__ = "integer" if integer else "number"
    return parse


def capacity_spec(option: str) -> Callable[[str], str]:
    """An argparse ``type`` for TYPE=COUNT[@HOURS] (budget what-if's --running and --on-demand): COUNT instances
    (1 to 1,000) that have run HOURS (0 to a month); the text itself is what the what-if parses."""
    import re

    def parse(text: str) -> str:
        match = re.match(r"^(?P<type>[a-z0-9-]+\.[a-z0-9-]+)=(?P<count>\d+)(@(?P<hours>\d+(\.\d+)?))?$", text)
        example = f"e.g. {option} g5.xlarge=4@2.5: 4 instances that have run 2.5 hours"
        if not match:
            raise argparse.ArgumentTypeError(f"{text!r}: expected TYPE=COUNT[@HOURS] ({example})")
        if not INSTANCES[0] <= int(match["count"]) <= INSTANCES[1]:
            raise argparse.ArgumentTypeError(f"{text!r}: COUNT {match['count']} is out of range: instances of one "
                                             f"type, from {INSTANCES[0]} to {INSTANCES[1]:,} ({example})")
        if match["hours"] and not float(match["hours"]) <= MONTH_HOURS:
            raise argparse.ArgumentTypeError(f"{text!r}: HOURS {match['hours']} is out of range: how long they have "
                                             f"run this month, from 0 to {MONTH_HOURS} ({example})")
        return text

    parse.__name__ = "capacity"
    return parse


PROG = "python -m ml_platform_constructs"
HOW_TO_SIGN_IN = ("sign in (aws sso login --profile NAME, after aws configure sso --profile NAME once) and run with "
                  "AWS_PROFILE=NAME, or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line naming the command and where its usage is."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {self.prog}: {message} (usage: {self.prog} --help)\n")


@contextlib.contextmanager
def refusals_are_bad_arguments(prog: str) -> Iterator[None]:
    """A one-line refusal (``SystemExit("error: ...")``) raised inside is of the command's arguments (two that go
    together, a value the price table lacks): the parser's one line, exit 2 (``usage_error``)."""
    try:
        yield
    except SystemExit as refused:
        if isinstance(refused.code, str):
            usage_error(prog, refused.code.removeprefix("error: "))
        raise


def usage_error(prog: str, message: str) -> NoReturn:
    """A bad argument found after parsing (two that go together, a value the price table lacks): the parser's one
    line, exit 2."""
    import sys

    print(f"error: {prog}: {message} (usage: {prog} --help)", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


class Session:
    """A boto3 session for a command that calls AWS, checked before the first call: the Region and credentials
    are there, or the command ends with one line saying how to provide them."""

    def __init__(self, region: Optional[str], factory: Optional[Callable[..., Any]] = None) -> None:
        if factory is None:
            try:
                import boto3
            except ImportError:
                raise SystemExit("error: these commands call AWS and need boto3: pip install boto3") from None
            factory = boto3.session.Session
        self.session = factory(region_name=region)
        if not self.session.region_name:
            raise SystemExit(f"error: no AWS Region: pass --region REGION (before or after the command, e.g. {PROG} "
                             "--region eu-west-1 budget status) or set AWS_DEFAULT_REGION")
        if self.session.get_credentials() is None:
            raise SystemExit(f"error: no AWS credentials for {self.session.region_name}: {HOW_TO_SIGN_IN}")
        self.region = self.session.region_name

    def client(self, name: str, region: Optional[str] = None) -> Any:
        return self.session.client(name, region_name=region or self.region)

    def operator(self) -> str:
        return self.client("sts").get_caller_identity()["Arn"]


def _default_region(factory: Optional[Callable[..., Any]]) -> Optional[str]:
    """The Region boto3 would use (AWS_DEFAULT_REGION, the profile), if boto3 is there: what-if calls no AWS."""
    try:
        return Session(None, factory).region if factory else __import__("boto3").session.Session().region_name
    except (ImportError, SystemExit):
        return None


# The exit codes of every operator command, the library's and the platform app's (docs/COMMANDS.md, "Exit codes"): a
# CI job tells a verdict from a failure by the code alone, and reads the detail from --json. The job side's rehearsal,
# which imports nothing of this library, defines the same numbers (ml_platform_job.rehearse).
EXIT_OK = 0  # done; for a command that decides, decided for: promote, no drift, OK, PASS
EXIT_ERROR = 1  # an error: one line on stderr that says what to do
EXIT_USAGE = 2  # a bad argument: argparse's one line (Parser.error)
EXIT_DECIDED_AGAINST = 3  # decided against: refuse, drift, alarm, FAIL; the output says why
EXIT_NOT_JUDGED = 4  # too little data to decide; the output says what it had and what it needs
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C


def verdict_exit(decided_for: Optional[bool]) -> int:
    """The exit code of a verdict: for (0), against (3), or not judged (None: 4)."""
    return EXIT_NOT_JUDGED if decided_for is None else EXIT_OK if decided_for else EXIT_DECIDED_AGAINST


COLUMNS = 100  # every command's default output fits this width (--wide, where a command has it, for more)


def fit(text: str, width: int = COLUMNS) -> str:
    """``text`` with each line longer than ``width`` folded at spaces, its continuation indented two spaces more than
    the line; a word longer than the width (a URL, a path) stays whole on a line of its own."""
    import textwrap

    folded = []
    for line in text.split("\n"):
        if len(line) <= width:
            folded.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        folded += textwrap.wrap(line, width, subsequent_indent=indent + "  ", break_long_words=False,
                                break_on_hyphens=False) or [line]
    return "\n".join(folded)


class DecidedAgainst(SystemExit):
    """A verdict against, taken deep in a command (a promotion the gate refuses): exit 3 with its line, which the
    command prints as its output (``verdicts``), not as an error. ``str()`` is the line."""

    def __init__(self, line: str) -> None:
        super().__init__(EXIT_DECIDED_AGAINST)
        self.line = line

    def __str__(self) -> str:
        return self.line


def verdicts(main: Callable[..., int]) -> Callable[..., int]:
    """An entry point that prints a ``DecidedAgainst``'s line on standard output and returns 3."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            return main(*args, **kwargs)
        except DecidedAgainst as verdict:
            print(fit(verdict.line))
            return EXIT_DECIDED_AGAINST

    return run


def interrupted(main: Callable[..., int]) -> Callable[..., int]:
    """An entry point that a Ctrl-C ends with one line and exit status 130, not a traceback (these commands start no
    processes of their own: an AWS call in flight is simply abandoned)."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            import sys

            print("interrupted (Ctrl-C): stopped; run the command again to start over", file=sys.stderr)
            raise SystemExit(INTERRUPTED_EXIT) from None

    return run


def one_line_errors(main: Callable[..., int]) -> Callable[..., int]:
    """An entry point whose AWS and file errors end it with one line (what failed, what to do), not a traceback."""

    @functools.wraps(main)
    @interrupted
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError
        except ImportError:  # without boto3 only the commands that call no AWS run; Session says so
            return main(*args, **kwargs)
        try:
            return main(*args, **kwargs)
        except NoRegionError:
            raise SystemExit("error: no AWS Region: pass --region REGION or set AWS_DEFAULT_REGION") from None
        except NoCredentialsError:
            raise SystemExit(f"error: no AWS credentials: {HOW_TO_SIGN_IN}") from None
        except ClientError as error:
            details = error.response.get("Error", {})
            hint = " (the credentials lack that permission)" if "AccessDenied" in details.get("Code", "") else ""
            raise SystemExit(f"error: AWS refused {error.operation_name}: {details.get('Code', 'error')}: "
                             f"{_one_line(details.get('Message', ''))}{hint}") from None
        except BotoCoreError as error:  # an expired SSO token, a missing profile, no network
            raise SystemExit(f"error: {_one_line(error)}") from None
        except (FileNotFoundError, IsADirectoryError, PermissionError) as error:
            raise SystemExit(f"error: {error.filename}: {error.strerror}") from None

    return run


def add_size_gib(parser: argparse.ArgumentParser) -> None:
    """dataset build's --size-gib, checked for its range as it is parsed (the app's command shares it)."""
    parser.add_argument("--size-gib", type=bounded(*GIB_VOLUME, "the volume's size in GiB, at least the dataset's",
                                                   example="--size-gib 200", integer=True),
                        required=True, help="the volume's size, at least the dataset's (1 to 65,536 GiB)")


def add_drift_figures(parser: argparse.ArgumentParser) -> None:
    """drift-baseline's --bins and --max-categories, checked for their range as they are parsed (the app's command
    shares them)."""
    parser.add_argument("--bins", type=bounded(2, 100, "histogram bins per numeric feature", example="--bins 10",
                                               integer=True), default=10,
                        help="per numeric feature, 2 to 100 (default 10)")
    parser.add_argument("--max-categories", type=bounded(1, 1000, "categories kept per categorical feature",
                                                         example="--max-categories 20", integer=True), default=20,
                        help="per categorical feature, 1 to 1,000 (default 20)")


def add_what_if_figures(parser: argparse.ArgumentParser) -> None:
    """budget what-if's figures, each checked for its range as it is parsed (the app's command shares them)."""
    parser.add_argument("--actual", type=bounded(*SPEND_USD, "Budgets' actual spend this month in USD",
                                                 example="--actual 1200"),
                        default=0.0, help="Budgets' actual spend this month (USD, 0 to 10,000,000)")
    parser.add_argument("--budget-age-hours", type=bounded(0, MONTH_HOURS, "how old Budgets' figure is, in hours",
                                                           example="--budget-age-hours 8"),
                        default=0.0, help=f"how old Budgets' figure is (0 to {MONTH_HOURS} hours)")
    parser.add_argument("--running", action="append", default=[], metavar="TYPE=COUNT[@HOURS]",
                        type=capacity_spec("--running"), help="Spot instances running (COUNT 1 to 1,000)")
    parser.add_argument("--on-demand", action="append", default=[], metavar="TYPE=COUNT[@HOURS]",
                        type=capacity_spec("--on-demand"), help="On-Demand instances running")


def add_job_figures(parser: argparse.ArgumentParser) -> None:
    """job submit's --gpus and --nodes, checked for their range as they are parsed (the app's command shares them);
    whether the queue's types have that many GPUs is checked before any AWS call too."""
    from ..advice.gpu_catalog import ACCELERATOR_CATALOG
    from .jobs import MULTI_NODE_NODES

    most = max(entry.gpu_count for entry in ACCELERATOR_CATALOG.values())
    parser.add_argument("--gpus", type=bounded(1, most, "GPUs per instance", example="--gpus 1", integer=True),
                        help="GPUs per instance (default: all of the smallest type's)")
    parser.add_argument("--nodes", type=node_spec(MULTI_NODE_NODES[1]), default=1, metavar="N|MIN:MAX",
                        help=f"instances of a multi-node job, 1 to {MULTI_NODE_NODES[1]} (default 1); MIN:MAX (e.g. "
                             "1:8): an elastic job that starts at MIN and resizes itself (the queue's elastic_max_nodes)")


def node_spec(most: int) -> Callable[[str], Any]:
    """An argparse ``type`` for --nodes: N (1 to ``most``) or MIN:MAX (an elastic job; (MIN, MAX), or N when equal)."""
    def parse(text: str) -> Any:
        parts = text.strip().split(":")
        meaning = (f"instances of the job (2 or more: a multi-node job), from 1 to {most} (e.g. --nodes 2), or an "
                   f"elastic range MIN:MAX (e.g. --nodes 1:{most})")
        try:
            if len(parts) > 2:
                raise ValueError
            low, high = int(parts[0]), int(parts[-1])
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: {meaning}") from None
        if not 1 <= low <= high <= most:
            raise argparse.ArgumentTypeError(f"{text} is out of range: {meaning}")
        return low if low == high else (low, high)

    parse.__name__ = "node count"
    return parse


def parser() -> Parser:
    # --region goes before or after the command: on the main parser and, without a default of its own (SUPPRESS),
    # on every command, so a value after the command is not reset by the main parser's default.
    region = argparse.ArgumentParser(add_help=False)
    region.add_argument("--region", action="append", default=argparse.SUPPRESS, metavar="REGION",
                        help="the AWS Region (prices refresh: each Region to refresh, repeatable)")
    main_parser = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                         parents=[region])
    commands = main_parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                          metavar="{dataset,drift-baseline,budget,job,prices}")

    def command(group: Any, name: str, help: str) -> Parser:
        return group.add_parser(name, help=help, parents=[region], description=help)

    dataset = commands.add_parser("dataset", help="dataset snapshots", parents=[region]).add_subparsers(
        dest="action", required=True, parser_class=Parser)
    build = command(dataset, "build", "build a dataset snapshot with DatasetSnapshotBuilder's runbook")
    for option, text in (("--runbook", "DatasetSnapshotBuilder.runbook_name"),
                         ("--bucket", "DatasetBucket.bucket_name"), ("--name", "the dataset's name"),
                         ("--version", "its version, e.g. v3"), ("--prefix", "its prefix, e.g. datasets/imagenet/")):
        build.add_argument(option, required=True, help=text)
    add_size_gib(build)
    drift = command(commands, "drift-baseline", "build an endpoint's drift baseline from a training sample")
    drift.add_argument("sample", type=Path, help="a CSV with a header, or JSON Lines (.jsonl)")
    drift.add_argument("--endpoint", required=True, help="the endpoint's name (MonitoredEndpoint.endpoint_name)")
    drift.add_argument("--exclude", action="append", default=[], help="a column that is not a model input")
    add_drift_figures(drift)
    target = drift.add_mutually_exclusive_group(required=True)
    target.add_argument("--bucket", help="the endpoint's baseline_bucket: upload there")
    target.add_argument("--output", type=Path, help="write the baseline to this file instead")
    budget = commands.add_parser("budget", help="a BudgetGuard's stop", parents=[region]).add_subparsers(
        dest="action", required=True, parser_class=Parser)
    command(budget, "resume", "resume what the guard stopped").add_argument(
        "--function", required=True, help="BudgetGuard.stop_function.function_name")
    command(budget, "status", "the governed fleets and queues, running or stopped").add_argument(
        "--scope", default=ACCOUNT_SCOPE, help="the guard's budget_scope (default: account)")
    what_if = command(budget, "what-if", "what the guard would decide for these figures (no AWS call)")
    what_if.add_argument("--monthly-limit", type=bounded(0.01, SPEND_USD[1], "BudgetGuard's monthly_limit in USD",
                                                         example="--monthly-limit 2000"),
                         required=True, help="BudgetGuard's monthly_limit (USD)")
    what_if.add_argument("--stop-at-percent", type=bounded(0.01, 100, "the guard's stop_at_percent",
                                                           example="--stop-at-percent 80"),
                         default=80, help="its stop_at_percent (default 80)")
    add_what_if_figures(what_if)
    what_if.add_argument("--now", type=datetime.fromisoformat, help="ISO 8601 (default: now, UTC)")
    what_if.add_argument("--price-table", type=Path, help="the guard's price_table file (default: the shipped one)")
    what_if.add_argument("--json", action="store_true")
    job = commands.add_parser("job", help="training jobs on a TrainingQueue", parents=[region]).add_subparsers(
        dest="action", required=True, parser_class=Parser)
    submit = command(job, "submit", "run a training job on a queue (its command after --)")
    submit.usage = f"{PROG} job submit QUEUE --image IMAGE --name NAME [--gpus N] [--nodes N|MIN:MAX] -- COMMAND..."
    submit.add_argument("queue", help="TrainingQueue.queue_name")
    submit.add_argument("--image", required=True, help="the job's image in Amazon ECR, with a tag or digest")
    submit.add_argument("--name", help="the job's identity: a resubmission under the same name resumes")
    add_job_figures(submit)
    command(job, "list", "the queue's jobs by state").add_argument("queue", help="TrainingQueue.queue_name")
    for name, text in (("logs", "every attempt's log"), ("cancel", "stop a job (running: SIGTERM, it checkpoints)")):
        sub = command(job, name, text)
        sub.add_argument("queue", help="TrainingQueue.queue_name")
        sub.add_argument("job_id")
    cost = command(job, "cost", "what a job really cost, per accuracy point and per million tokens")
    cost.add_argument("job_id")
    cost.add_argument("--json", action="store_true")
    cost.add_argument("--instance-type", help="for attempts whose container instance ECS no longer describes")
    cost.add_argument("--lifecycle", choices=("spot", "on-demand"))
    cost.add_argument("--price-table", type=Path, help="a team's own price table (default: the shipped one)")
    prices = commands.add_parser("prices", help="the GPU price table", parents=[region]).add_subparsers(
        dest="action", required=True, parser_class=Parser)
    refresh = command(prices, "refresh", "refresh a price table from AWS for BudgetGuard(price_table=...)")
    refresh.add_argument("--output", type=Path, required=True, help="where to write the table")
    refresh.add_argument("--table", type=Path, help="a table to refresh (default: the one the library ships)")
    refresh.add_argument("--no-spot-advisor", action="store_true", help="keep each Region's spot_by_type as it is")
    return main_parser


def price_table_file(path: Path, flag: str = "--price-table") -> Any:
    """A price table from a file given on the command line, or one line naming the file and what it should be."""
    from ..advice.price_table import PriceTable
    from ..errors import ValidationError

    what = "a price table (JSON, as prices refresh writes it)"
    if not path.is_file():
        raise SystemExit(f"error: {flag} {path} {'is a directory' if path.is_dir() else 'does not exist'}: give "
                         f"{what}")
    try:
        return PriceTable.from_file(path)
    except UnicodeDecodeError as error:
        raise SystemExit(f"error: {flag} {path} is not UTF-8 text (byte {error.start} is not: a binary file?): give "
                         f"{what}") from None
    except ValidationError as error:
        raise SystemExit(f"error: {flag} {path}: {_one_line(str(error).split(' is invalid: ', 1)[-1])}") from None


def refresh_prices(session_for: Callable[[str], Session], regions: list[str], *, output: Path,
                   table: Optional[Path] = None, spot_advisor: bool = True, advisor: Optional[dict] = None,
                   today: Optional[date] = None, now: Optional[datetime] = None) -> list[str]:
    """Refreshes ``regions`` of a price table (``table``, or the shipped one) from AWS and writes it to ``output``."""
    from ..advice.price_table import PriceTable, fetch_spot_advisor, refresh

    current = (price_table_file(table, "--table") if table else PriceTable.shipped()).table
    pricing = session_for("us-east-1").client("pricing", "us-east-1")  # the Price List API answers there
    if spot_advisor and advisor is None:
        advisor = fetch_spot_advisor()
    now = now or datetime.now(timezone.utc)
    lines = []
    for region in regions:
        current = refresh(current, pricing, session_for(region).client("ec2", region), region, today or now.date(),
                          now, advisor if spot_advisor else None)
        entry = current["regions"][region]
        lines.append(f"{region}: {len(entry['on_demand_hourly']) - len(entry['not_offered'])} types offered, not "
                     f"offered (priced at the dearest Region's rate): {', '.join(entry['not_offered']) or 'none'}")
    output.write_text(PriceTable(current, str(output)).to_json())
    lines.append(f"-> {output}: pass it as BudgetGuard(price_table=PriceTable.from_file({str(output)!r}))")
    return lines


def budget_what_if(args: argparse.Namespace, region: Optional[str]) -> str:
    from ..advice.budget_what_if import format_what_if, what_if

    if not region:
        raise SystemExit(f"error: {PROG} budget what-if: name the guard's Region, whose prices apply: --region REGION")
    table = price_table_file(args.price_table).table if args.price_table else None
    now = args.now or datetime.now(timezone.utc)
    with refusals_are_bad_arguments(f"{PROG} budget what-if"):
        result = what_if(label="the guard", prices=budget_guard.load_prices(region, table),
                         monthly_limit=args.monthly_limit, stop_at_percent=args.stop_at_percent, actual=args.actual,
                         budget_age_hours=args.budget_age_hours, running=args.running, on_demand=args.on_demand,
                         now=now if now.tzinfo else now.replace(tzinfo=timezone.utc))
    return json.dumps(result, indent=1) if args.json else fit(format_what_if(result))


def job_cost(args: argparse.Namespace, session: Callable[[], Session]) -> str:
    from ..advice import job_cost

    with refusals_are_bad_arguments(f"{PROG} job cost"):
        override = job_cost.check_override(args.instance_type, args.lifecycle)
    table = price_table_file(args.price_table).table if args.price_table else None
    aws = session()
    cost = job_cost.gather(args.job_id, {name: aws.client(name) for name in ("batch", "ecs", "cloudwatch")},
                           datetime.now(timezone.utc), override, region=aws.region, table=table)
    return json.dumps(cost.to_json(), indent=1) if args.json else job_cost.format_cost(cost)


def job_command(args: argparse.Namespace, command: list[str], session: Callable[[], Session]) -> list[str]:
    from . import jobs

    if args.action == "cost":
        return [job_cost(args, session)]
    if args.action == "submit" and not command:
        raise jobs.JobError(f"no command: put it after --, e.g. {PROG} job submit {args.queue} --image IMAGE "
                            "--name NAME -- python train.py")
    aws = session()
    batch = aws.client("batch")
    target = jobs.find_queue(batch, args.queue)
    follow = f"{PROG} job list {args.queue} --region {aws.region}"
    if args.action == "submit":
        submission = jobs.check_submission(target, args.image, command, gpus=args.gpus, nodes=args.nodes,
                                           name=args.name)
        return jobs.submitted_lines(submission, jobs.submit(batch, submission), follow)
    if args.action == "list":
        return jobs.list_jobs(batch, target.job_queues())
    job = jobs.describe(batch, args.job_id, [arn for _, arn in target.job_queues()], f"training queue {args.queue}")
    if args.action == "logs":
        return jobs.job_logs(aws.client("logs"), job)
    return [jobs.cancel(batch, job, f"cancelled with {PROG} job cancel")]


@one_line_errors
def main(argv: list[str], session_factory: Optional[Callable[..., Any]] = None) -> int:
    # A job's command follows "--" and may carry options of its own.
    ours, command = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser().parse_args(ours)
    regions = getattr(args, "region", None) or []

    def session(region: Optional[str] = None) -> Session:
        return Session(region or (regions[-1] if regions else None), session_factory)

    if args.command == "drift-baseline":
        if args.output:
            check_output(args.output)
        baseline, features = baseline_from_sample(args.sample, args.exclude, args.bins, args.max_categories)
        body = json.dumps(baseline, indent=1)
        if args.output:
            write_output(args.output, body)
            where = str(args.output)
        else:
            key = baseline_key(args.endpoint)
            session().client("s3").put_object(Bucket=args.bucket, Key=key, Body=body.encode())
            where = f"s3://{args.bucket}/{key}"
        print(f"baseline of {baseline['sample_size']} rows, {len(features)} features -> {where}")
    elif args.command == "dataset":
        print(start_dataset_build(session().client("ssm"), runbook=args.runbook, bucket=args.bucket,
                                  name=args.name, version=args.version, prefix=args.prefix, size_gib=args.size_gib))
    elif args.command == "job":
        print("\n".join(job_command(args, command, session)))
    elif args.command == "budget" and args.action == "what-if":
        print(budget_what_if(args, regions[-1] if regions else _default_region(session_factory)))
    elif args.command == "prices":
        if not regions:
            raise SystemExit(f"error: {PROG} prices refresh: name each Region to refresh with --region REGION")
        print("\n".join(refresh_prices(session, regions, output=args.output, table=args.table,
                                       spot_advisor=not args.no_spot_advisor)))
    elif args.action == "resume":
        aws = session()
        print(json.dumps(resume_budget_stop(aws.client("lambda"), args.function, aws.operator() or getpass.getuser()),
                         indent=1))
    else:
        aws = session()
        print("\n".join(budget_status(aws.client("autoscaling"), args.scope, aws.client("batch"), aws.client("ec2"),
                                      PendingJobs(aws.client("ssm")))))
    return 0
