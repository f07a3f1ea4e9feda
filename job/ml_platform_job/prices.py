"""Prices of GPU instances, and what an attempt of a training job cost: its hours x its instance's price x the share of
the instance's GPUs it used. One rule for ``./platform job cost`` (from AWS Batch's records), for a run's passport
(from the attempts the job recorded itself) and for the budget guard's spend check. Standard library only: this
module and ``prices.json`` are also copied into the budget guard's Lambda function.

Prices: ``prices.json`` (On-Demand per type and Region; Spot at the family's assumed discount, not the price actually
paid in that hour), through ``load_prices(region)``; its sources and dates are in the file.
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Optional

try:
    from .instances import INSTANCE_SHAPES
except ImportError:  # in Lambda the module sits at the top of the package (it does not need the shapes)
    INSTANCE_SHAPES = {}

LIFECYCLES = ("spot", "on-demand")
TABLE_FILE = "prices.json"


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
    dearest: dict = {"on_demand_hourly": {}, "spot_discount": {}}
    for rates in regions.values():
        for name, price in rates["on_demand_hourly"].items():
            dearest["on_demand_hourly"][name] = max(price, dearest["on_demand_hourly"].get(name, 0.0))
        for family, discount in rates["spot_discount"].items():
            dearest["spot_discount"][family] = min(discount, dearest["spot_discount"].get(family, 1.0))
    first = next(iter(regions.values()))
    return {**shared, **first, **dearest, "region": region, "unpriced_region": True}


def hourly_usd(prices: Mapping, instance_type: str, lifecycle: str) -> float:
    """The instance's price per hour: On-Demand, or On-Demand less the family's Spot discount."""
    if lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle={lifecycle!r}: one of {LIFECYCLES}")
    hourly = prices["on_demand_hourly"][instance_type]
    if lifecycle == "spot":
        hourly *= 1 - prices["spot_discount"].get(instance_type.split(".")[0], 0)
    return hourly


def gpu_share(instance_type: str, gpus_used: Optional[int]) -> float:
    """The share of the instance's GPUs a job used (1.0 when unknown or the type is not a known GPU type)."""
    shape = INSTANCE_SHAPES.get(instance_type)
    return min(1.0, gpus_used / shape.gpus) if gpus_used and shape else 1.0
