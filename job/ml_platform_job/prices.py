"""Prices of GPU instances, and what an attempt of a training job cost: its hours x its instance's price x the share of
the instance's GPUs it used. Standard library only: this module and ``prices.json`` are also copied into the budget
guard's Lambda function.

One price: ``hourly_usd`` is the one function every command and construct takes an hour of Spot or On-Demand from
(``./platform advise`` and the advisor, the budget guard and ``budget what-if``, ``./platform cost`` and ``tco``,
``./platform job cost``, run passports, the goodput ledger), over the one table, ``prices.json`` (per Region, through
``load_prices(region)``); ``price_source`` says where that table's prices come from and when.

- On-Demand: the Region's ``on_demand_hourly``.
- Spot: the Region's ``spot_hourly`` for the type where its entry has one (a measured per-type Spot price a team may
  add; the shipped table has none), else On-Demand x (1 - the family's ``spot_discount``): the table's conservative
  low end, measured across AZs (see each entry's ``spot_discount_note``), so estimates and the guard err high; 0 for a
  family the entry lacks (Spot priced as On-Demand). Never above On-Demand (Spot's default maximum price) nor below
  0. Not the price actually paid in that hour.
- Spot as paid: ``spot_usd`` prices one instance over a span from a Spot price history (EC2
  ``DescribeSpotPriceHistory``: the price in effect at a moment is the latest change at or before it), and
  ``paid_rate`` gives an attempt's effective USD per hour and where it comes from (that history, else the list
  price above); the operator side records it in the attempt (``rate``), which the goodput ledger then uses.
- The Spot Instance Advisor's per-type data (``spot_by_type``) is no price: the advisor reads each type's
  interruption band from it, and may show its 30-day average saving, labelled as such.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Optional

try:
    from .instances import INSTANCE_SHAPES
except ImportError:  # in Lambda the module sits at the top of the package (it does not need the shapes)
    INSTANCE_SHAPES = {}

LIFECYCLES = ("spot", "on-demand")
TABLE_FILE = "prices.json"
# What hourly_usd does with a type the table does not price: "raise" (KeyError naming it; the default) or "dearest"
# (the table's dearest On-Demand rate: the budget guard prices whatever runs, and errs towards stopping).
UNKNOWN_TYPES = ("raise", "dearest")
SPOT_RULE = ("On-Demand x (1 - the family's spot_discount, the table's conservative low end), or the type's own "
             "spot_hourly where the table has one; never above On-Demand")
SPOT_RULE_SHORT = "Spot at the family's conservative discount"
REFRESH = "python -m ml_platform_constructs prices refresh --region REGION"


def load_table() -> dict:
    """The whole price table shipped beside this module (or, in the budget guard's function, a team's own)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, TABLE_FILE)) as handle:
        return json.load(handle)


def load_prices(region: str, table: Optional[dict] = None) -> dict:
    """The price table of one Region: its own rates over the table's shared defaults, with ``region`` set. A
    Region the table lacks is priced at the dearest rate of any Region it has (flagged ``unpriced_region``)."""
    table = table or load_table()
    shared = {k: v for k, v in table.items() if k != "regions"}
    regions = table["regions"]
    if region in regions:
        return {**shared, **regions[region], "region": region}
    dearest: dict = {"on_demand_hourly": {}, "spot_discount": {}, "spot_hourly": {}}
    for rates in regions.values():
        for name, price in rates["on_demand_hourly"].items():
            dearest["on_demand_hourly"][name] = max(price, dearest["on_demand_hourly"].get(name, 0.0))
        for family, discount in rates["spot_discount"].items():
            dearest["spot_discount"][family] = min(discount, dearest["spot_discount"].get(family, 1.0))
        for name, price in rates.get("spot_hourly", {}).items():
            dearest["spot_hourly"][name] = max(price, dearest["spot_hourly"].get(name, 0.0))
    first = next(iter(regions.values()))
    return {**shared, **first, **dearest, "region": region, "unpriced_region": True}


def hourly_usd(prices: Mapping, instance_type: str, lifecycle: str, *, unknown: str = "raise") -> float:
    """USD per hour of one instance of ``instance_type`` on ``lifecycle`` ("spot" or "on-demand") from a Region's
    price table (``load_prices``): the one price (the module docstring says how Spot is priced). ``unknown``: what a
    type the table does not price gets: "raise" (KeyError naming the type, the default) or "dearest" (the table's
    dearest On-Demand rate, Spot at the type's family discount: the budget guard's choice, erring towards stopping)."""
    if lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle={lifecycle!r}: one of {LIFECYCLES}")
    if unknown not in UNKNOWN_TYPES:
        raise ValueError(f"unknown={unknown!r}: one of {UNKNOWN_TYPES}")
    rates = prices["on_demand_hourly"]
    on_demand = rates.get(instance_type)
    if on_demand is None:
        if unknown == "raise":
            raise KeyError(f"instance_type={instance_type!r} has no price in the {prices.get('region', 'given')} "
                           f"table ({len(rates)} types priced): use a priced type, or refresh the table ({REFRESH})")
        on_demand = max(rates.values())
    if lifecycle == "on-demand":
        return on_demand
    measured = prices.get("spot_hourly", {}).get(instance_type)
    if measured is not None:
        return min(max(float(measured), 0.0), on_demand)
    discount = prices.get("spot_discount", {}).get(instance_type.split(".")[0], 0.0)
    return on_demand * (1 - min(max(discount, 0.0), 1.0))


def price_source(prices: Mapping, detail: bool = True) -> str:
    """Where a Region's prices come from and when, in one line: the Region, the date the table gives
    (``retrieved``), its ``source`` and how Spot is priced (with the entry's ``spot_discount_note``).
    ``detail=False``: the Region, the date and the Spot rule in short. A team's table without these fields says so."""
    region = prices.get("region", "?")
    retrieved = prices.get("retrieved", "no date in the table")
    head = f"{region} ({retrieved})"
    if prices.get("unpriced_region"):
        head += f", the table has no {region} rates: the dearest of its Regions'"
    if not detail:
        return f"{head}; {SPOT_RULE_SHORT}"
    spot = f"Spot = {SPOT_RULE}"
    source = str(prices.get("source", "no source in the table")).rstrip(". ")
    note = str(prices.get("spot_discount_note", "")).rstrip(". ")
    return f"{head}: {source}; {spot}" + (f" ({note})" if note else "")


def gpu_share(instance_type: str, gpus_used: Optional[int]) -> float:
    """The share of the instance's GPUs a job used (1.0 when unknown or the type is not a known GPU type)."""
    shape = INSTANCE_SHAPES.get(instance_type)
    return min(1.0, gpus_used / shape.gpus) if gpus_used and shape else 1.0


# --- Spot as paid: a Spot price history ---------------------------------------------------------------------------

# DescribeSpotPriceHistory "returns the prices of the instance types within that time range. It also returns the last
# price change before the start time, which is the effective price as of the start time": a price holds from its
# Timestamp until the next change. The EC2 API's own text, as the AWS SDK for .NET's reference carries it:
# docs.aws.amazon.com/sdkfornet/v3/apidocs/items/EC2/MEC2DescribeSpotPriceHistoryDescribeSpotPriceHistoryRequest.html
# (EC2 API Reference: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotPriceHistory.html).
SPOT_HISTORY_SOURCE = "the Spot price history (EC2 DescribeSpotPriceHistory)"


def _moment(value: Any, where: str) -> float:
    """Epoch seconds of a history entry's Timestamp: a number, a datetime (boto3's) or an ISO 8601 string."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return moment.timestamp()
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{where}={value!r}: not an ISO 8601 time") from None
        return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise ValueError(f"{where}={value!r}: epoch seconds, a datetime or an ISO 8601 time")


def spot_history(history: Iterable[Any]) -> list[tuple[float, float]]:
    """A Spot price history as (epoch seconds, USD per hour) pairs, oldest first. Entries may be pairs or
    ``DescribeSpotPriceHistory``'s items (``{"Timestamp": ..., "SpotPrice": "0.9"}``), in any order. The history must
    be one instance type's, one Availability Zone's and one product description's: two prices at one moment raise
    ValueError (a history of several zones mixed), as does a price that is not a finite number of 0 or more."""
    points: dict[float, float] = {}
    for index, entry in enumerate(history):
        if isinstance(entry, Mapping):
            when, price = entry.get("Timestamp"), entry.get("SpotPrice")
        else:
            try:
                when, price = entry
            except (TypeError, ValueError):
                raise ValueError(f"history[{index}]={entry!r}: (epoch seconds, USD per hour) or "
                                 "DescribeSpotPriceHistory's {'Timestamp': ..., 'SpotPrice': ...}") from None
        moment = _moment(when, f"history[{index}] time")
        try:
            usd = float(price)
        except (TypeError, ValueError):
            usd = math.nan
        if not (math.isfinite(usd) and usd >= 0):
            raise ValueError(f"history[{index}] price={price!r}: a finite number of 0 or more (USD per hour)")
        if moment in points and points[moment] != usd:
            raise ValueError(f"history[{index}]: two prices at {_iso(moment)} ({points[moment]:g} and {usd:g} USD/h): "
                             "give the history of one Availability Zone and product description")
        points[moment] = usd
    return sorted(points.items())


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


# EC2 bills a Spot Instance at "the Spot price that's in effect, billed to the nearest second" (AWS whitepaper
# "How Spot Instances Work": https://docs.aws.amazon.com/whitepapers/latest/cost-optimization-leveraging-ec2-spot-
# instances/how-spot-instances-work.html): each second at the price then in effect. (Third-party pages quote the
# 2017 announcement's "in effect at the beginning of each instance-hour"; the per-second reading is AWS's own.)
def spot_usd(history: Iterable[Any], start: float, end: float) -> float:
    """USD for one Spot instance over [``start``, ``end``) (epoch seconds) from a price history (``spot_history``
    reads it): each moment at the price in effect then, the latest entry at or before it (as
    ``DescribeSpotPriceHistory`` defines it). ValueError when ``end`` is before ``start``, or when no entry is at or
    before ``start`` (the price in effect then is unknown: ask the history from a StartTime at or before it)."""
    for name, value in (("start", start), ("end", end)):
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ValueError(f"{name}={value!r}: epoch seconds")
    if end < start:
        raise ValueError(f"end={end:g} ({_iso(end)}): before start={start:g} ({_iso(start)})")
    points = spot_history(history)
    before = [price for moment, price in points if moment <= start]
    if not before:
        first = f"its first entry is at {_iso(points[0][0])}" if points else "it is empty"
        raise ValueError(f"no Spot price at or before start={start:g} ({_iso(start)}) in the history ({first}): "
                         "ask DescribeSpotPriceHistory with a StartTime at or before the span's start (it returns the "
                         "price in effect then)")
    price, since, total = before[-1], float(start), 0.0
    for moment, next_price in points:
        if start < moment < end:
            total += price * (moment - since) / 3600
            price, since = next_price, moment
    return total + price * (end - since) / 3600


def paid_rate(prices: Mapping, instance_type: str, lifecycle: str, *, history: Optional[Iterable[Any]] = None,
              start: Optional[float] = None, end: Optional[float] = None) -> tuple[float, str]:
    """(USD per hour of one instance, where it comes from) for an attempt. Spot with a price ``history`` (the
    attempt's instance type, Availability Zone and product description) and the attempt's paid span [``start``,
    ``end``) (epoch seconds): ``spot_usd`` over the span / its hours (the price in effect at ``start`` for an empty
    span), the price paid. Otherwise the list price (``hourly_usd``: On-Demand from the table, Spot at the table's
    rule, which is not the price paid). ValueError for a history without ``start`` and ``end``."""
    if lifecycle == "spot" and history is not None:
        if start is None or end is None:
            raise ValueError("paid_rate: a Spot history prices a span: give start and end (epoch seconds)")
        points = spot_history(history)
        if end > start:
            usd = spot_usd(points, start, end) / ((end - start) / 3600)
        else:  # an empty span (or end before start, which spot_usd refuses): the price in effect at its start
            spot_usd(points, start, end)
            usd = [price for moment, price in points if moment <= start][-1]
        return usd, SPOT_HISTORY_SOURCE
    usd = hourly_usd(prices, instance_type, lifecycle)
    region = f"{prices.get('region', '?')} ({prices.get('retrieved', 'no date in the table')})"
    if lifecycle == "on-demand":
        return usd, f"the On-Demand list price, {region}"
    return usd, f"Spot at the table's rule ({SPOT_RULE_SHORT}), {region}: not the price paid"
