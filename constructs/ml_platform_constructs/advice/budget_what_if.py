"""What a BudgetGuard would decide for given figures, without AWS: the guard's own decision
(``runtime.handlers.budget_guard.decide``) with a budget, a Region's prices and the capacity you describe.

The command of ``python -m ml_platform_constructs budget what-if`` and of the platform app's
``./platform budget what-if ENV``. Capacity is ``TYPE=COUNT[@HOURS]``: COUNT instances of TYPE that have run HOURS
(default 0: just launched); Spot with ``running``, On-Demand with ``on_demand``. Each hour is priced as every command
prices it (``ml_platform_job.prices.hourly_usd``, through the guard's ``price_per_hour``); the result says where the
prices come from and when (``prices``, ``ml_platform_job.prices.price_source``; the text its Region, date and Spot
rule, ``prices_short``).
"""

from __future__ import annotations

import re
import textwrap
from datetime import datetime, timedelta
from typing import Sequence

from ml_platform_job.prices import price_source

from ..runtime.handlers import budget_guard
from ..runtime.handlers.budget_guard import ON_DEMAND, SPOT, RunningCapacity

CAPACITY = re.compile(r"^(?P<type>[a-z0-9-]+\.[a-z0-9-]+)=(?P<count>\d+)(@(?P<hours>\d+(\.\d+)?))?$")


def parse_capacity(spec: str, lifecycle: str, now: datetime, prices: dict) -> list[RunningCapacity]:
    """TYPE=COUNT[@HOURS] as COUNT records of TYPE launched HOURS ago."""
    match = CAPACITY.match(spec)
    if not match:
        raise SystemExit(f"error: {spec!r}: expected TYPE=COUNT[@HOURS], e.g. g6e.24xlarge=4@2.5")
    if match["type"] not in prices["on_demand_hourly"]:
        raise SystemExit(f"error: {match['type']!r} has no price in the {prices['region']} table; priced types: "
                         f"{', '.join(sorted(prices['on_demand_hourly']))}")
    launched = now - timedelta(hours=float(match["hours"] or 0))
    return [RunningCapacity(match["type"], lifecycle, launched, f"what-if {spec}")] * int(match["count"])


def what_if(*, label: str, prices: dict, monthly_limit: float, stop_at_percent: float, actual: float,
            budget_age_hours: float, running: Sequence[str], on_demand: Sequence[str], now: datetime) -> dict:
    """The guard's decision for these figures; ``label`` names what is decided for (an environment, a guard)."""
    if not monthly_limit > 0:
        raise SystemExit(f"error: --monthly-limit {monthly_limit}: the budget in USD, above 0")
    if not 0 < stop_at_percent <= 100:
        raise SystemExit(f"error: --stop-at-percent {stop_at_percent}: the guard's stop_at_percent, in (0, 100]")
    capacity = [record for spec in running for record in parse_capacity(spec, SPOT, now, prices)]
    capacity += [record for spec in on_demand for record in parse_capacity(spec, ON_DEMAND, now, prices)]
    decision = budget_guard.decide(actual=actual, budget_age_hours=budget_age_hours, capacity=capacity,
                                   prices=prices, monthly_limit=monthly_limit, stop_at_percent=stop_at_percent,
                                   now=now)
    return {"environment": label, "region_priced": prices["region"], "now": now.isoformat(), **decision.as_dict(),
            "running": list(running), "on_demand": list(on_demand), "prices": price_source(prices),
            "prices_short": price_source(prices, detail=False)}


def format_what_if(result: dict) -> str:
    def usd(value: float) -> str:
        return f"{value:>12,.2f} USD"

    lines = [f"{result['environment']} at {result['now']} ({result['region_priced']} prices): "
             f"decision {result['decision'].upper()}",
             f"  stop line          {usd(result['stop_line'])}",
             f"  Budgets' actual    {usd(result['actual'])}  (taken as of {result['budget_as_of']})",
             f"  + GPU since then   {usd(result['accrued_since_budget'])}",
             f"  = estimated to now {usd(result['estimated_to_date'])}",
             f"  running cost       {result['hourly_cost']:>12,.2f} USD/h",
             f"  projected month    {usd(result['projected_month'])}"]
    if result["crossing_date"]:
        lines.append(f"  line crossed on    {result['crossing_date']:>16}")
    lines.append(f"  why: {result['reason']}")
    if result.get("prices_short"):
        lines += textwrap.wrap(f"prices: {result['prices_short']} (--json: their source)", 100, initial_indent="  ",
                               subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)
