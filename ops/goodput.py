"""Where every GPU dollar went: the goodput ledger of each recorded run (job) and their total.

  ./platform goodput ENV|--local [--month YYYY-MM] [--queue Q] [--wide | --json | --csv]

Each run's attempts, as its passport records them, split into buckets that add up to their paid instance time:
productive, data_wait (blocked on the input pipeline), startup, restore, checkpoint_save, evaluation, lost (steps
since the last checkpoint of a reclaimed, stopped or vanished attempt) and idle, in hours, dollars (each attempt's
own rate: Spot or On-Demand x nodes x GPU share, as the run's cost) and percent, with a bar per job. Startup is a
lower bound: the platform does not see an instance's boot before the job's attempt began. Runs come from the same
store as ``./platform runs`` (ENV's SageMaker MLflow, or --local: ./platform up's store); ``--month`` keeps the runs
started in that month (UTC), ``--queue`` those of one queue (the passport's queue, else the run's experiment).
``--json``: ``{"runs": [{"run_id", "run_name", "queue", "started_at", "ledger"}], "total": ledger}``; ``--csv``: one
row per run and bucket (run_id, run_name, queue, started_at, bucket, hours, usd, share).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import textwrap
from typing import Any, Optional

from ml_platform_job.goodput import BUCKETS, Ledger

from ops.cli import Parser
from ops.runs import open_store, record_ledger, run_record

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
SEARCH_LIMIT = 1000  # runs read from the store, newest first
BAR_WIDTH = 50
COLUMNS = 100  # the default output's width (--wide: as wide as the table needs)
COMPACT_NAME = 20
BAR_CHARACTERS = {"productive": "#", "data_wait": "d", "startup": "s", "restore": "r", "checkpoint_save": "c",
                  "evaluation": "e", "lost": "x", "idle": "."}
LEGEND = "  bar: " + " ".join(f"{c}={b}" for b, c in BAR_CHARACTERS.items())


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


def run_ledgers(client: Any, *, month: Optional[str], queue: Optional[str]) -> list[dict]:
    """The recorded runs (newest first) with their ledgers, filtered by month and queue; runs with no attempts in
    their record are left out."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    found = []
    for run in client.search_runs(experiments, max_results=SEARCH_LIMIT, order_by=["attributes.start_time DESC"]):
        record = run_record(client, run.info.run_id)
        if month and not (record.get("started_at") or "").startswith(month):
            continue
        if queue and queue_of(record) != queue:
            continue
        ledger, notes = record_ledger(record.get("passport") or {})
        if ledger is None:
            continue
        found.append({"run_id": record["run_id"], "run_name": record["run_name"], "queue": queue_of(record),
                      "started_at": record["started_at"], "ledger": ledger, "notes": notes})
    return found


def total(runs: list[dict]) -> Ledger:
    summed = Ledger()
    for run in runs:
        summed = summed + run["ledger"]
    return summed


def format_table(runs: list[dict], where: str, *, wide: bool = False) -> str:
    """One line per run within 100 columns (name, paid hours, USD and the bar), the total's buckets wrapped; ``wide``:
    each bucket's share as a column too (about 190 columns)."""
    if not runs:
        return f"No recorded runs with attempts in {where} for this selection."
    summed = total(runs)
    if wide:
        columns = "".join(f" {b[:10]:>10}" for b in BUCKETS)
        lines = [f"Goodput ledger of {len(runs)} run(s) in {where} (percent of paid instance time):",
                 f"  {'run':<28} {'hours':>8} {'USD':>10}{columns}  {'':<{BAR_WIDTH}}"]

        def row(name: str, ledger: Ledger) -> str:
            shares = "".join(f" {ledger.share(b) or 0:>10.1%}" for b in BUCKETS)
            return (f"  {name[:28]:<28} {ledger.paid_seconds / 3600:>8.3f} {ledger.paid_usd:>10.4f}{shares}  "
                    f"{bar(ledger)}")
    else:
        lines = textwrap.wrap(f"Goodput ledger of {len(runs)} run(s) in {where} (paid instance time; --wide: every "
                              "bucket's share):", width=COLUMNS, subsequent_indent="  ")

        def row(name: str, ledger: Ledger) -> str:
            return (f"  {name[:COMPACT_NAME]:<{COMPACT_NAME}} {ledger.paid_seconds / 3600:>8.3f} h "
                    f"{ledger.paid_usd:>9.2f} USD  {bar(ledger)}")
    lines += [row(r["run_name"] or r["run_id"], r["ledger"]) for r in runs]
    lines.append(row("total", summed))
    lines += textwrap.wrap("total by bucket: " + "; ".join(
        f"{b} {summed.seconds[b] / 3600:.3f} h {summed.usd[b]:.4f} USD ({summed.share(b):.1%})"
        for b in BUCKETS if summed.seconds[b]), width=COLUMNS, initial_indent="  ", subsequent_indent="    ")
    lines += textwrap.wrap(LEGEND.strip(), width=COLUMNS, initial_indent="  ", subsequent_indent="    ")
    notes = sorted({note for r in runs for note in r["notes"]})
    lines += [wrapped for note in notes
              for wrapped in textwrap.wrap(f"({note})", width=COLUMNS, initial_indent="  ", subsequent_indent="   ")]
    return "\n".join(lines)


def as_json(runs: list[dict]) -> str:
    return json.dumps({"runs": [{**{k: r[k] for k in ("run_id", "run_name", "queue", "started_at")},
                                 "ledger": {**r["ledger"].to_dict(), "notes": r["notes"]}} for r in runs],
                       "total": total(runs).to_dict()}, indent=1)


def as_csv(runs: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run_id", "run_name", "queue", "started_at", "bucket", "hours", "usd", "share"])
    for r in runs:
        for b in BUCKETS:
            ledger = r["ledger"]
            writer.writerow([r["run_id"], r["run_name"], r["queue"], r["started_at"], b,
                             round(ledger.seconds[b] / 3600, 6), round(ledger.usd[b], 6),
                             "" if ledger.share(b) is None else round(ledger.share(b), 6)])
    return out.getvalue()


def parse(argv: list[str]):
    parser = Parser("./platform goodput", description=__doc__)
    parser.add_argument("target", metavar="ENV|--local")
    parser.add_argument("--month", help="YYYY-MM: runs started in that month (UTC)")
    parser.add_argument("--queue", help="the runs of one queue")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--csv", action="store_true")
    parser.add_argument("--wide", action="store_true", help="every bucket's share as a column (about 190 columns)")
    # "--local" reads as an option to argparse: accept it where ENV goes.
    args = parser.parse_args([a if a != "--local" else "@local" for a in argv])
    args.target = "--local" if args.target == "@local" else args.target
    if args.month is not None and not MONTH.match(args.month):
        parser.error(f"--month {args.month}: a month as YYYY-MM, e.g. 2026-11")
    if args.queue is not None and not args.queue.strip():
        parser.error("--queue: a queue's name (./platform runs list shows each run's experiment)")
    return args


def main(argv: list[str], *, client: Any = None) -> int:
    args = parse(argv)  # every argument checked before the store is opened
    where = "the given store"
    if client is None:
        client, where = open_store(args.target)
    runs = run_ledgers(client, month=args.month, queue=args.queue)
    sys.stdout.write(as_json(runs) + "\n" if args.json else as_csv(runs) if args.csv
                     else format_table(runs, where, wide=args.wide) + "\n")
    return 0


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
