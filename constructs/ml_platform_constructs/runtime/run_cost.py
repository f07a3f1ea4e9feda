"""What an attempt of a training job cost: its hours x its instance's price x the share of the instance's GPUs it
used. One rule for ``./platform job cost`` (from AWS Batch's records) and for a run's passport (from the attempts
the job recorded itself). Standard library only.

Prices: ``prices.json`` (On-Demand per type; Spot at the family's assumed discount, not the price actually paid in
that hour), through ``budget_guard.load_prices(region)``.
"""

from __future__ import annotations

from typing import Mapping, Optional

LIFECYCLES = ("spot", "on-demand")


def hourly_usd(prices: Mapping, instance_type: str, lifecycle: str) -> float:
    """The instance's price per hour: On-Demand, or On-Demand less the family's Spot discount."""
    if lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle={lifecycle!r}: one of {LIFECYCLES}")
    hourly = prices["on_demand_hourly"][instance_type]
    if lifecycle == "spot":
        hourly *= 1 - prices["spot_discount"].get(instance_type.split(".")[0], 0)
    return hourly


def gpu_share(instance_type: str, gpus_used: Optional[int]) -> float:
    """The share of the instance's GPUs a job used (1.0 when unknown or the type is not in the GPU catalog)."""
    from ..advice.gpu_catalog import GPU_CATALOG

    entry = GPU_CATALOG.get(instance_type)
    return min(1.0, gpus_used / entry.gpu_count) if gpus_used and entry else 1.0
