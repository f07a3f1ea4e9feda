"""Where every GPU dollar went: the goodput ledger of each recorded run (job) and their total.

  ./platform goodput ENV|--local [--month YYYY-MM] [--queue Q] [--wide | --json | --csv] [--reconcile FILE]

Each run's attempts, as its passport records them, split into buckets that add up to their paid GPU time
(``ml_platform_job.goodput``): productive, data_wait (blocked on the input pipeline), startup, restore,
checkpoint_save, evaluation, tracking (the record's own writes), lost (steps since the last checkpoint of a
reclaimed, stopped, failed or vanished attempt), other (time in the job no phase timed) and idle, in GPU-hours,
dollars (each attempt's own rate: Spot or On-Demand x nodes x GPU share, as the run's cost) and percent, with a bar
per job. Startup is a lower bound where a record lacks its instance's boot (a note says so).

Runs come from the same store as ``./platform runs`` (ENV's SageMaker MLflow, or --local: ./platform up's store),
every page of it. A run whose job crashed has no record in MLflow: its record is read from next to its checkpoints
(ENV: S3), and an attempt that ended without a word is billed to its last record. ``--month`` takes the attempts'
time inside that month (UTC): an attempt that crosses the month's bounds is split at them, and a run is listed when
any attempt overlaps the month. ``--queue`` keeps the runs of one queue (the passport's queue, else the run's
experiment). ENV prices a Spot attempt at what was paid: EC2's Spot price history of its instance type in its
Availability Zone (ec2:DescribeSpotPriceHistory); --local, or an attempt without its zone, at the list price (the
notes say which). A run whose record cannot be read is left out with a note after the table (exit 0).
``--json``: ``{"runs": [{"run_id", "run_name", "queue", "started_at", "ledger"}], "total": ledger, "notes": [...],
"skipped": [{"run_id", "run_name", "reason"}]}`` (each ledger with ``gpu_hours``, each bucket too); ``--csv``: one
row per run and bucket (run_id, run_name, queue, started_at, bucket, hours, usd, share, gpu_hours), the notes on
stderr. ``--reconcile FILE``: a Cost and Usage Report (CUR 2.0 export, CSV or .csv.gz, with split cost allocation
data): each run's ledger dollars against the bill's split + unused cost of its attempts' rows (matched by the ECS
task the record names, else by its instance and hours), the totals and the scale factor (bill / ledger); ``--json``
adds ``reconcile``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import textwrap
import time
from datetime import datetime, timezone
from typing import Any, Iterable, Optional

from ml_platform_job.goodput import BUCKETS, Ledger, month_window, paid_span

from ops import runs as runs_ops
from ops import terminal
from ops.cli import Parser, aws_errors_in_one_line
from ops import instance_records
from ops.runs import ENDED_STATUSES, RunsError, open_store_session, record_ledger, run_record, settled

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
PAGE_SIZE = 1000  # runs per page of MLflow's search (every page is read)
# A run MLflow shows ended this long before the month began is not read (its record is not fetched): its attempts
# ended before the month. The margin covers the clocks of the job and of MLflow's server.
ENDED_MARGIN_SECONDS = 24 * 3600
BAR_WIDTH = 50
COLUMNS = 100  # the default output's width (--wide: as wide as the table needs)
COMPACT_NAME = 17
BAR_CHARACTERS = {"productive": "#", "data_wait": "d", "startup": "s", "restore": "r", "checkpoint_save": "c",
                  "evaluation": "e", "tracking": "t", "lost": "x", "other": "o", "idle": "."}
LEGEND = "  bar: " + " ".join(f"{c}={b}" for b, c in BAR_CHARACTERS.items())
# What one run's record may raise when it is ragged (hand-edited, cut short, of another format): that run is left
# out with a note, the others are listed.
UNREADABLE = (ValueError, KeyError, TypeError, AttributeError, IndexError, ArithmeticError)
SPOT_HISTORY_ACTION = "ec2:DescribeSpotPriceHistory"
PRODUCT = "Linux/UNIX"


def bar(ledger: Ledger, width: int = BAR_WIDTH) -> str:
    """A stacked bar of the buckets' shares in plain characters, ``width`` long (largest remainders rounding, so
    every bar is the same length)."""
    if not ledger.paid_seconds:
        return " " * width
    exact = {b: ledger.seconds[b] / ledger.paid_seconds * width for b in BUCKETS}
    cells = {b: int(exact[b]) for b in BUCKETS}
    for b in sorted(BUCKETS, key=lambda b: -(exact[b] - cells[b]))[:width - sum(cells.values())]:
        cells[b] += 1
    return "".join(BAR_CHARACTERS[b] * cells[b] for b in BUCKETS)


def queue_of(record: dict) -> Optional[str]:
    return (record.get("passport") or {}).get("queue") or record.get("experiment")


def overlaps(attempt: dict, window: tuple[float, float]) -> bool:
    """Whether the attempt's paid span (the ledger's ``paid_span``) overlaps the window [start, end) (an attempt of
    no length yet: its start inside it). ValueError for a ragged attempt, as the ledger says it."""
    start, end = paid_span(attempt)
    return start < window[1] and (end > window[0] or (end <= start and start >= window[0]))


# --- every run of the store ----------------------------------------------------------------------------------------

def experiment_ids(client: Any) -> list[str]:
    """Every active experiment's id, every page."""
    found, token = [], None
    while True:
        page = client.search_experiments(max_results=PAGE_SIZE, page_token=token)
        found += [e.experiment_id for e in page]
        token = getattr(page, "token", None)
        if not token:
            return found


def every_run(client: Any, experiments: list[str], filter_string: str, shown: Any = None) -> list[Any]:
    """Every run of the experiments MLflow's ``filter_string`` keeps, page after page (``page_token``) until MLflow
    gives no token. Oldest first: MLflow's token is an offset, and a run started while the pages are read then
    comes last instead of shifting the pages (a run seen twice is kept once)."""
    found, seen, tokens, token = [], set(), set(), None
    while True:
        page = client.search_runs(experiments, filter_string=filter_string, max_results=PAGE_SIZE,
                                  order_by=["attributes.start_time ASC"], page_token=token)
        for run in page:
            if run.info.run_id not in seen:
                seen.add(run.info.run_id)
                found.append(run)
        if shown is not None:
            shown.advance(f"{len(found)} runs")
        token = getattr(page, "token", None)
        if not token or token in tokens:  # a store answering the same token again would loop forever
            return found
        tokens.add(token)


def ended_before(run: Any, moment: float) -> bool:
    """Whether MLflow shows the run ended (FINISHED, FAILED, KILLED) a margin before ``moment``: its attempts did
    too (a resumed run is RUNNING again, a crashed one never ended in MLflow)."""
    status, end = getattr(run.info, "status", None), getattr(run.info, "end_time", None)
    return (status in ENDED_STATUSES and isinstance(end, (int, float))
            and end / 1000 < moment - ENDED_MARGIN_SECONDS)


# --- Spot as paid --------------------------------------------------------------------------------------------------

def zone_of(attempt: dict) -> Optional[str]:
    return attempt.get("availability_zone") or (attempt.get("host") or {}).get("availability_zone")


def region_of(zone: str) -> Optional[str]:
    found = re.match(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)", zone)
    return found.group(1) if found else None


def spot_attempts(passports: Iterable[dict]) -> list[dict]:
    return [a for p in passports for a in (p.get("attempts") if isinstance(p.get("attempts"), list) else [])
            if isinstance(a, dict) and a.get("lifecycle") == "spot" and a.get("instance_type")]


def spot_history(ec2: Any, instance_type: str, zone: str, start: float, end: float) -> list[dict]:
    """DescribeSpotPriceHistory of one type in one zone over [start, end], every page (with the price in effect at
    ``start``: the API returns the last change before its StartTime)."""
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=[instance_type], AvailabilityZone=zone, ProductDescriptions=[PRODUCT],
        StartTime=datetime.fromtimestamp(start, timezone.utc), EndTime=datetime.fromtimestamp(end, timezone.utc))
    return [entry for page in pages for entry in page.get("SpotPriceHistory", [])]


def priced_at_history(passports: list[dict], session: Any, window: Optional[tuple[float, float]],
                      local: bool) -> tuple[list[dict], list[str]]:
    """The passports with each Spot attempt's ``rate`` set (on copies) at the price paid: EC2's Spot price history
    of its type in its zone over its span (inside ``window`` when given), one history call per type and zone for
    the whole report; and the notes on what stayed at the list price, and why."""
    spot = spot_attempts(passports)
    if not spot:
        return passports, []
    if local or session is None:
        return passports, ["--local reads no Spot price history: Spot attempts at the list price"]
    from botocore.exceptions import BotoCoreError, ClientError
    from ml_platform_job.prices import paid_rate

    spans: dict[int, tuple[float, float]] = {}
    wanted: dict[tuple[str, str], list[float]] = {}
    no_zone = 0
    for attempt in spot:
        zone = zone_of(attempt)
        try:
            start, end = paid_span(attempt)
        except UNREADABLE:
            continue  # the ledger says what is wrong with it
        if window is not None:
            start, end = max(start, window[0]), max(min(end, window[1]), max(start, window[0]))
        if not zone or not region_of(str(zone)):
            no_zone += 1
            continue
        spans[id(attempt)] = (start, end)
        span = wanted.setdefault((attempt["instance_type"], zone), [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    notes = []
    if no_zone:
        notes.append(f"{no_zone} Spot attempt(s) without an Availability Zone in their record: at the list price "
                     "(the table's rule, not the price paid)")
    histories: dict[tuple[str, str], list] = {}
    failed: dict[str, int] = {}
    denied = None
    clients: dict[str, Any] = {}
    with terminal.progress(f"reading the Spot price history of {len(wanted)} instance type(s) and zone(s)",
                           total=len(wanted)) as shown:
        for (instance_type, zone), (start, end) in sorted(wanted.items()):
            shown.advance(f"{instance_type} {zone}")
            if denied:
                continue
            region = region_of(zone)
            try:
                if region not in clients:
                    clients[region] = session.client("ec2", region_name=region)
                histories[(instance_type, zone)] = spot_history(clients[region], instance_type, zone, start, end)
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "error")
                if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
                    denied = code
                else:
                    failed[code] = failed.get(code, 0) + 1
            except BotoCoreError as error:
                failed[type(error).__name__] = failed.get(type(error).__name__, 0) + 1
    if denied:
        notes.append(f"Spot attempts at the list price (not the price paid): the credentials lack "
                     f"{SPOT_HISTORY_ACTION} ({denied})")
    for code, count in sorted(failed.items()):
        notes.append(f"{count} type(s) and zone(s) without Spot price history ({code}): their Spot attempts at the "
                     "list price")
    priced, unpriced = 0, 0
    out = []
    for passport in passports:
        attempts = passport.get("attempts") if isinstance(passport.get("attempts"), list) else None
        if not attempts:
            out.append(passport)
            continue
        copies = []
        for attempt in attempts:
            history = histories.get((attempt.get("instance_type"), zone_of(attempt))) \
                if isinstance(attempt, dict) and id(attempt) in spans else None
            if history is None:
                copies.append(attempt)
                continue
            start, end = spans[id(attempt)]
            try:
                usd, _ = paid_rate({}, attempt["instance_type"], "spot", history=history, start=start, end=end)
            except ValueError:  # no price at or before the span's start in the history
                unpriced += 1
                copies.append(attempt)
                continue
            priced += 1
            copies.append({**attempt, "rate": {"usd_per_hour": usd, "source": f"Spot price history {zone_of(attempt)}"}})
        out.append({**passport, "attempts": copies})
    if priced:
        notes.append(f"{priced} Spot attempt(s) at the price paid: EC2's Spot price history of their type in their "
                     f"Availability Zone ({PRODUCT})")
    if unpriced:
        notes.append(f"{unpriced} Spot attempt(s) at the list price: no Spot price in the history at their start")
    return out, notes


# --- the ledgers ---------------------------------------------------------------------------------------------------

def skip_note(run_id: str, run_name: Optional[str], why: str) -> str:
    return f"run {run_id} ({run_name or 'no name'}): record unreadable ({why}): skipped"


def _why(error: BaseException) -> str:
    text = " ".join(str(error.code if isinstance(error, SystemExit) else error).split())
    text = text.removeprefix("error: ")
    text = f"{type(error).__name__}: {text}" if not isinstance(error, SystemExit) else text
    return text if len(text) <= 120 else text[:117] + "..."


def run_ledgers(client: Any, *, month: Optional[str], queue: Optional[str], target: str = "--local",
                session: Any = None, now: Optional[float] = None) -> tuple[list[dict], list[dict], list[str]]:
    """(the recorded runs newest first with their ledgers, the runs left out as unreadable, notes on the whole
    report): every run of the store, filtered by month and queue; runs with no attempts in their record (or none in
    the month) are left out."""
    now = time.time() if now is None else now
    window = month_window(month) if month else None
    local = target == "--local"
    s3 = session.client("s3") if session is not None and not local else None
    local_copies = runs_ops.LOCAL_STORE / "runs" if local else None
    experiments = experiment_ids(client)
    if not experiments:
        return [], [], []
    # MLflow's filter has no OR (nor "end_time is null"): a run started after the month is left out there; one
    # started before it may have attempts in it, unless MLflow shows it ended before the month (checked here,
    # before its record is read).
    query = f"attributes.start_time < {int(window[1] * 1000)}" if window else ""
    with terminal.progress(f"listing the runs of {len(experiments)} experiment(s)") as shown:
        runs = every_run(client, experiments, query, shown)
    if window:
        runs = [r for r in runs if not ended_before(r, window[0])]
    skipped: list[dict] = []
    candidates = []
    read: list[tuple[Optional[str], dict]] = []
    # AWS Batch's end of an attempt the record still says is running (ENV only; batch:DescribeJobs).
    batch_end = None if local or session is None else runs_ops.BatchEnds(session.client("batch"))
    with terminal.progress(f"reading {len(runs)} run record(s)", total=len(runs)) as shown:
        for run in runs:
            run_id, name = run.info.run_id, getattr(run.info, "run_name", None)
            shown.advance(name or run_id)
            try:
                record = run_record(client, run_id, target, s3=s3, local_copies=local_copies)
                name = record.get("run_name") or name
                passport, notes = settled(record.get("passport") or {}, record.get("status"), now, batch_end)
                read.append((queue_of(record), passport))  # every run read: a later job on an instance ends a claim
                if queue and queue_of(record) != queue:
                    continue
                attempts = passport.get("attempts") or []
                if not isinstance(attempts, list):
                    raise TypeError(f"passport.attempts is a {type(attempts).__name__}, not a list of attempts")
                if not attempts and record.get("record_note"):  # a record that could not be read: say why
                    raise RunsError(record["record_note"])
                if not attempts or (window and not any(overlaps(a, window) for a in attempts)):
                    continue
                candidates.append((record, passport, notes))
            except UNREADABLE + (RunsError,) as error:
                skipped.append({"run_id": run_id, "run_name": name, "reason": _why(error)})
    # The paid time after the last job on each instance (its scale-in), from the queue's GPU metrics (ENV only; set
    # on the report's copies of the attempts before their Spot price is looked up over their whole paid span).
    scale_notes = ([] if local or session is None else instance_records.apply(session, read, now=now))
    passports, report_notes = priced_at_history([c[1] for c in candidates], session, window, local)
    report_notes = scale_notes + (batch_end.notes if batch_end else []) + report_notes
    found = []
    for (record, _, settle_notes), passport in zip(candidates, passports):
        try:
            ledger, notes = record_ledger(passport, window=window)
        except UNREADABLE as error:
            skipped.append({"run_id": record.get("run_id"), "run_name": record.get("run_name"), "reason": _why(error)})
            continue
        if ledger is None or not ledger.attempts:
            continue
        found.append({"run_id": record["run_id"], "run_name": record["run_name"], "queue": queue_of(record),
                      "started_at": record["started_at"], "ledger": ledger, "notes": settle_notes + notes,
                      "record_note": record.get("record_note"), "passport": passport})
    found.sort(key=lambda r: r["started_at"] or "", reverse=True)
    return found, skipped, report_notes


def total(runs: list[dict]) -> Ledger:
    summed = Ledger()
    for run in runs:
        summed = summed + run["ledger"]
    return summed


def ledger_dict(ledger: Ledger) -> dict:
    """The ledger's ``to_dict`` with ``gpu_hours`` for it and each bucket (the ledger's seconds are GPU-seconds)."""
    found = ledger.to_dict()
    found.setdefault("gpu_hours", round(ledger.paid_seconds / 3600, 4))
    for bucket, figures in found["buckets"].items():
        figures.setdefault("gpu_hours", round(ledger.seconds[bucket] / 3600, 4))
    return found


def gpu_hours(ledger: Ledger, bucket: Optional[str] = None) -> float:
    return (ledger.paid_seconds if bucket is None else ledger.seconds[bucket]) / 3600


def figure(value: float, width: int, decimals: int) -> str:
    """``value`` right-aligned in ``width`` characters, with fewer decimals as it grows (never wider)."""
    for places in range(decimals, -1, -1):
        text = f"{value:>{width}.{places}f}"
        if len(text) <= width:
            return text
    return f"{value:>{width}.{max(0, width - 7)}e}"


def wrapped(text: str, indent: str = "  ", more: str = "    ") -> list[str]:
    return textwrap.wrap(text, width=COLUMNS, initial_indent=indent, subsequent_indent=more)


def format_table(runs: list[dict], where: str, *, wide: bool = False, skipped: Optional[list[dict]] = None,
                 notes: Optional[list[str]] = None, month: Optional[str] = None) -> str:
    """One line per run within 100 columns (name, paid GPU-hours, USD and the bar), the total's buckets wrapped;
    ``wide``: each bucket's share as a column too (about 210 columns). The notes, then the runs left out, after."""
    skipped, notes = skipped or [], notes or []
    span = f", {month} UTC (attempts cut at the month's bounds)" if month else ""
    if not runs:
        lines = textwrap.wrap(f"No recorded runs with attempts in {where}{span} for this selection.", width=COLUMNS,
                              subsequent_indent="  ")
    else:
        summed = total(runs)
        if wide:
            columns = "".join(f" {b[:10]:>10}" for b in BUCKETS)
            lines = [f"Goodput ledger of {len(runs)} run(s) in {where}{span} (percent of paid GPU time):",
                     f"  {'run':<28} {'GPU-h':>8} {'USD':>10}{columns}  {'':<{BAR_WIDTH}}"]

            def row(name: str, ledger: Ledger) -> str:
                shares = "".join(f" {ledger.share(b) or 0:>10.1%}" for b in BUCKETS)
                return (f"  {name[:28]:<28} {figure(gpu_hours(ledger), 8, 3)} {figure(ledger.paid_usd, 10, 4)}"
                        f"{shares}  {bar(ledger)}")
        else:
            lines = textwrap.wrap(f"Goodput ledger of {len(runs)} run(s) in {where}{span} (paid GPU time; --wide: "
                                  "every bucket's share):", width=COLUMNS, subsequent_indent="  ")

            def row(name: str, ledger: Ledger) -> str:
                return (f"  {name[:COMPACT_NAME]:<{COMPACT_NAME}} {figure(gpu_hours(ledger), 8, 3)} GPU-h "
                        f"{figure(ledger.paid_usd, 9, 2)} USD  {bar(ledger)}")
        lines += [row(r["run_name"] or r["run_id"], r["ledger"]) for r in runs]
        lines.append(row("total", summed))
        lines += wrapped("total by bucket: " + "; ".join(
            f"{b} {gpu_hours(summed, b):.3f} GPU-h {summed.usd[b]:.4f} USD ({summed.share(b):.1%})"
            for b in BUCKETS if summed.seconds[b]))
        lines += wrapped(LEGEND.strip())
    shown = sorted({note for r in runs for note in r["notes"]}) + notes + sorted(
        {r["record_note"] for r in runs if r.get("record_note")})
    lines += [line for note in shown for line in wrapped(f"({note})", "  ", "   ")]
    lines += [line for s in skipped for line in wrapped(skip_note(s["run_id"], s["run_name"], s["reason"]))]
    return "\n".join(lines)


def as_json(runs: list[dict], skipped: Optional[list[dict]] = None, notes: Optional[list[str]] = None) -> str:
    return json.dumps({"runs": [{**{k: r[k] for k in ("run_id", "run_name", "queue", "started_at")},
                                 "ledger": {**ledger_dict(r["ledger"]), "notes": r["notes"]}} for r in runs],
                       "total": ledger_dict(total(runs)), "notes": notes or [], "skipped": skipped or []}, indent=1)


def as_csv(runs: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run_id", "run_name", "queue", "started_at", "bucket", "usd", "share", "gpu_hours"])
    for r in runs:
        for b in BUCKETS:
            ledger = r["ledger"]
            writer.writerow([r["run_id"], r["run_name"], r["queue"], r["started_at"], b, round(ledger.usd[b], 6),
                             "" if ledger.share(b) is None else round(ledger.share(b), 6),
                             round(gpu_hours(ledger, b), 6)])
    return out.getvalue()


# --- --reconcile: the ledger's dollars against the bill ------------------------------------------------------------

# CUR 2.0 (Data Exports) with split cost allocation data (ECS and AWS Batch tasks' share of their instance):
# https://docs.aws.amazon.com/cur/latest/userguide/table-dictionary-cur2-split-line-item.html
CUR_COLUMNS = ("line_item_resource_id", "split_line_item_parent_resource_id", "split_line_item_split_cost",
               "split_line_item_unused_cost", "line_item_usage_start_date")
CUR_EXPECTED = "a CUR 2.0 export (CSV or .csv.gz) with split cost allocation data (INCLUDE_SPLIT_COST_ALLOCATION_DATA)"
HOUR = 3600.0


def _cur_time(text: str) -> float:
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace(" ", "T", 1))
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def read_cur(path: str, problem: Any) -> list[dict]:
    """The split cost rows of a CUR 2.0 CSV export (gzip-compressed or not): each one's task (its resource id), its
    instance (the parent resource), its usage span and its split + unused cost. ``problem(message)`` ends the command
    (one line, exit 2) for a file that is not one: unreadable, binary, empty, ragged, a column missing or a cost or
    time that does not parse."""
    import gzip
    import zlib
    from pathlib import Path

    where = f"--reconcile {path}"
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        problem(f"{where} cannot be read ({error.strerror or error}): give {CUR_EXPECTED}")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as error:
            problem(f"{where}: a gzip file cut short or damaged ({error}): give {CUR_EXPECTED}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        problem(f"{where} is not UTF-8 text (byte {error.start} is not: a binary file?): give {CUR_EXPECTED}")
    if not text.strip():
        problem(f"{where} is empty: give {CUR_EXPECTED}")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip().lower() for name in next(reader)]
        missing = [name for name in CUR_COLUMNS if name not in header]
        if missing:
            problem(f"{where}: no column {', '.join(missing)} in its header: give {CUR_EXPECTED}")
        index = {name: header.index(name) for name in header}
        end_at = index.get("line_item_usage_end_date")
        rows = []
        for number, fields in enumerate(reader, start=2):
            if not fields:
                continue
            if len(fields) != len(header):
                problem(f"{where}: line {number} has {len(fields)} fields, the header {len(header)} (a ragged or cut "
                        f"file): give {CUR_EXPECTED}")
            split, unused = (fields[index[c]].strip() for c in CUR_COLUMNS[2:4])
            if not split and not unused:
                continue  # not a split cost row (the instance's own line item, another service)
            try:
                cost = float(split or 0) + float(unused or 0)
                start = _cur_time(fields[index["line_item_usage_start_date"]])
                end = _cur_time(fields[end_at]) if end_at is not None and fields[end_at].strip() else start + HOUR
            except ValueError:
                problem(f"{where}: line {number}: a cost or a usage date that does not parse: give {CUR_EXPECTED}")
            if cost != cost or cost in (float("inf"), float("-inf")):
                problem(f"{where}: line {number}: a cost that is not a finite number: give {CUR_EXPECTED}")
            rows.append({"task": fields[index["line_item_resource_id"]].strip(),
                         "instance": fields[index["split_line_item_parent_resource_id"]].strip(),
                         "start": start, "end": max(end, start), "usd": cost})
    except csv.Error as error:
        problem(f"{where}: not CSV ({error}): give {CUR_EXPECTED}")
    return rows


def reconcile(runs: list[dict], rows: list[dict], window: Optional[tuple[float, float]]) -> dict:
    """Each run's ledger dollars of its attempts the bill has rows for, against those rows' split + unused cost:
    rows of the attempt's ECS task (``host.task_arn``) where the record has one, else of its instance
    (``host.instance_id``) during its paid span (other tasks on the instance in those hours included); each row
    counted once, only inside ``window``; a multi-node attempt by its main node's rows and its dollars per node.
    ``scale``: billed / ledger over the matched attempts. Instance hours with no task on them at all (a scale-in
    past the hour's tasks) are in the instance's own line item, not in split rows: not matched here."""
    inside = [r for r in rows if window is None or (r["start"] < window[1] and r["end"] > window[0])]
    by_task: dict[str, list[int]] = {}
    by_instance: dict[str, list[int]] = {}
    for number, row in enumerate(inside):
        if row["task"]:
            by_task.setdefault(row["task"], []).append(number)
        if row["instance"]:
            by_instance.setdefault(row["instance"], []).append(number)
    used: set[int] = set()
    found = []
    for run in runs:
        passport = run["passport"]
        ledger_usd = billed = 0.0
        matched, ways = 0, set()
        for attempt in passport.get("attempts") or []:
            host = attempt.get("host") if isinstance(attempt, dict) and isinstance(attempt.get("host"), dict) else {}
            try:
                start, end = paid_span(attempt)
            except UNREADABLE:
                continue
            if host.get("task_arn") and host["task_arn"] in by_task:
                numbers, way = by_task[host["task_arn"]], "task"
            elif host.get("instance_id") in by_instance:
                numbers = [n for n in by_instance[host["instance_id"]]
                           if inside[n]["start"] < max(end, start + 1) and inside[n]["end"] > start]
                way = "instance"
            else:
                continue
            numbers = [n for n in numbers if n not in used]
            if not numbers:
                continue
            used.update(numbers)
            own, _ = record_ledger({**passport, "attempts": [attempt]}, window=window)
            # Only the main node records its task and instance: a multi-node attempt's rows are that node's, so its
            # ledger dollars are compared per node (each node runs the same span at the same rate).
            nodes = attempt.get("nodes") if isinstance(attempt.get("nodes"), int) and attempt["nodes"] > 0 else 1
            ledger_usd += own.paid_usd / nodes if own is not None else 0.0
            billed += sum(inside[n]["usd"] for n in numbers)
            matched += len(numbers)
            ways.add(way)
        found.append({"run_id": run["run_id"], "run_name": run["run_name"], "ledger_usd": run["ledger"].paid_usd,
                      "matched_ledger_usd": ledger_usd, "billed_usd": billed if matched else None, "rows": matched,
                      "matched_by": "+".join(sorted(ways)) or None})
    ledger_total = sum(r["matched_ledger_usd"] for r in found if r["rows"])
    billed_total = sum(r["billed_usd"] for r in found if r["rows"])
    return {"rows": len(inside), "rows_matched": len(used), "runs": found, "ledger_usd": ledger_total,
            "billed_usd": billed_total, "scale": billed_total / ledger_total if ledger_total else None}


def format_reconcile(found: dict, path: str) -> str:
    lines = wrapped(f"Against the bill ({path}: {found['rows']} split cost row(s), {found['rows_matched']} matched to "
                    "attempts by their ECS task, else their instance and hours):", "", "  ")
    lines.append(f"  {'run':<{COMPACT_NAME}} {'ledger USD':>12} {'billed USD':>12} {'billed/ledger':>13}  matched by")
    for r in found["runs"]:
        if not r["rows"]:
            lines.append(f"  {(r['run_name'] or r['run_id'])[:COMPACT_NAME]:<{COMPACT_NAME}} "
                         f"{figure(r['ledger_usd'], 12, 2)} {'-':>12} {'-':>13}  no rows (no task or instance of it)")
            continue
        ratio = r["billed_usd"] / r["matched_ledger_usd"] if r["matched_ledger_usd"] else None
        lines.append(f"  {(r['run_name'] or r['run_id'])[:COMPACT_NAME]:<{COMPACT_NAME}} "
                     f"{figure(r['matched_ledger_usd'], 12, 2)} {figure(r['billed_usd'], 12, 2)} "
                     f"{'-' if ratio is None else figure(ratio, 13, 3)}  {r['matched_by']} ({r['rows']} rows)")
    lines.append(f"  {'total':<{COMPACT_NAME}} {figure(found['ledger_usd'], 12, 2)} {figure(found['billed_usd'], 12, 2)}"
                 f" {'-' if found['scale'] is None else figure(found['scale'], 13, 3)}")
    if found["scale"] is None:
        lines += wrapped("(no scale factor: no attempt of these runs matched a row of the bill; the records need "
                         "host.task_arn or host.instance_id)")
    else:
        lines += wrapped(f"(scale factor {found['scale']:.3f}: the bill's split + unused cost over the ledger's dollars "
                         "of the matched attempts; multiply the ledger's dollars by it for the billed figure)")
    return "\n".join(lines)


def parse(argv: list[str]):
    parser = Parser("./platform goodput", description=__doc__)
    parser.add_argument("target", metavar="ENV|--local")
    parser.add_argument("--month", help="YYYY-MM: the attempts' time in that month (UTC), split at its bounds")
    parser.add_argument("--queue", help="the runs of one queue")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--csv", action="store_true")
    parser.add_argument("--wide", action="store_true", help="every bucket's share as a column (about 210 columns)")
    parser.add_argument("--reconcile", metavar="FILE", help="a CUR 2.0 export (CSV) with split cost allocation data: "
                        "each run's ledger dollars against the bill's, and the scale factor")
    # "--local" reads as an option to argparse: accept it where ENV goes.
    args = parser.parse_args([a if a != "--local" else "@local" for a in argv])
    args.target = "--local" if args.target == "@local" else args.target
    if args.month is not None and not MONTH.match(args.month):
        parser.error(f"--month {args.month}: a month as YYYY-MM, e.g. 2026-11")
    if args.queue is not None and not args.queue.strip():
        parser.error("--queue: a queue's name (./platform runs list shows each run's experiment)")
    if args.reconcile is not None and args.csv:
        parser.error("--reconcile with --csv: the comparison is a table of its own (the table, or --json)")
    args.bill = None if args.reconcile is None else read_cur(args.reconcile, parser.error)
    return args


@aws_errors_in_one_line
def main(argv: list[str], *, client: Any = None, session: Any = None, now: Optional[float] = None) -> int:
    """``client`` and ``session`` (an MLflow client and ENV's boto3 Session) for tests; by default the store of the
    target and, for ENV, its checked Session."""
    args = parse(argv)  # every argument checked before the store is opened
    where = "the given store"
    if client is None:
        client, where, session = open_store_session(args.target)
    from mlflow.exceptions import MlflowException

    try:
        runs, skipped, notes = run_ledgers(client, month=args.month, queue=args.queue, target=args.target,
                                           session=session, now=now)
    except MlflowException as error:
        raise SystemExit(f"error: {where} answered with an error: {' '.join(str(error.message).split())[:300]} "
                         "(./platform runs list shows whether the store is readable)") from None
    billed = None if args.bill is None else reconcile(runs, args.bill, month_window(args.month) if args.month else None)
    if args.json:
        found = json.loads(as_json(runs, skipped, notes))
        if billed is not None:
            found["reconcile"] = {**billed, "file": args.reconcile}
        sys.stdout.write(json.dumps(found, indent=1) + "\n")
    elif args.csv:
        sys.stdout.write(as_csv(runs))
        for line in notes + [skip_note(s["run_id"], s["run_name"], s["reason"]) for s in skipped]:
            print(line, file=sys.stderr)
    else:
        sys.stdout.write(format_table(runs, where, wide=args.wide, skipped=skipped, notes=notes,
                                      month=args.month) + "\n")
        if billed is not None:
            sys.stdout.write(format_reconcile(billed, args.reconcile) + "\n")
    return 0


if __name__ == "__main__":
    terminal.entry_point(main)
