"""The GPU price table: a team's own copy (``PriceTable``, for ``BudgetGuard(price_table=...)``) and its refresh
from AWS (``python -m ml_platform_constructs prices refresh``). Standard library and boto3 only: no CDK.

The shipped table (``ml_platform_job/prices.json``) holds one entry per Region under ``regions``: every Region that offers
catalog types. Per Region a refresh reads:

- ``on_demand_hourly``: every catalog type (GPU and Trainium) from the AWS Price List Query API (service AmazonEC2;
  the API answers in us-east-1). A type the Region does not offer is listed in ``not_offered`` and priced at the
  dearest rate any Region of the table has (the budget guard prices whatever runs; the advisor excludes it);
- ``spot_discount``: per family, the lowest discount any size showed in any AZ over the last day of EC2 Spot price
  history (conservative: every command that prices Spot errs high); a family with no history in a Region new to the
  table gets 0 (Spot priced as On-Demand). The one price (``ml_platform_job.prices.hourly_usd``) prices every Spot
  hour from it, in the advisor, the budget guard, the cost estimate and job cost alike;
- ``spot_by_type``: per type, the Spot Instance Advisor's savings over On-Demand and its frequency-of-interruption
  band, from the public data file behind https://aws.amazon.com/ec2/spot/instance-advisor/ (``SPOT_ADVISOR_URL``;
  format: {"ranges": [{"index", "label", ...}], "spot_advisor": {region: {"Linux": {type: {"s": savings %,
  "r": band index}}}}}). The advisor reads each type's interruption band from these and shows the savings, a
  30-day average, as such: never as the price.

The other rates are kept. Needs AWS credentials (``pricing:GetProducts``, ``ec2:DescribeSpotPriceHistory``) and
HTTPS to spot-bid-advisor.s3.amazonaws.com.

A team's table may add ``spot_hourly`` per Region (USD per hour by type, a measured Spot price): ``hourly_usd``
prefers it to the family discount, capped at On-Demand. A refresh drops it (it would be older than the rates it
refreshed).
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from ..errors import ValidationError
from .gpu_catalog import ACCELERATOR_CATALOG
from ..runtime.handlers.budget_guard import load_table

SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
TABLE_FILE = "prices.json"  # its name in the budget guard's function
REFRESH_FIX = "write it with: python -m ml_platform_constructs prices refresh --region REGION --output prices.json"


def on_demand_price(pricing: Any, instance_type: str, region: str) -> Optional[float]:
    filters = {"instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
               "preInstalledSw": "NA", "capacitystatus": "Used"}
    response = pricing.get_products(ServiceCode="AmazonEC2", MaxResults=10, Filters=[
        {"Type": "TERM_MATCH", "Field": name, "Value": value} for name, value in filters.items()])
    for item in response["PriceList"]:
        terms = json.loads(item)["terms"].get("OnDemand", {})
        for term in terms.values():
            for dimension in term["priceDimensions"].values():
                price = float(dimension["pricePerUnit"]["USD"])
                if price > 0:
                    return price
    return None


def spot_discounts(ec2: Any, on_demand: Mapping[str, float], now: datetime) -> dict[str, float]:
    lowest: dict[str, float] = {}
    if not on_demand:
        return lowest
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=list(on_demand), ProductDescriptions=["Linux/UNIX"], StartTime=now - timedelta(days=1))
    for page in pages:
        for entry in page["SpotPriceHistory"]:
            instance_type = entry["InstanceType"]
            discount = max(0.0, 1 - float(entry["SpotPrice"]) / on_demand[instance_type])
            family = instance_type.split(".")[0]
            lowest[family] = round(min(lowest.get(family, 1.0), discount), 2)
    return lowest


def fetch_spot_advisor(url: str = SPOT_ADVISOR_URL, timeout: float = 60) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # a public S3 object: no credentials
        return json.load(response)


def spot_by_type(advisor: Mapping, region: str, types) -> dict[str, dict]:
    """The Advisor's Linux savings (fraction) and interruption band per catalog type in a Region."""
    bands = {item["index"] for item in advisor["ranges"]}
    linux = advisor["spot_advisor"].get(region, {}).get("Linux", {})
    found = {}
    for name in sorted(types):
        entry = linux.get(name)
        if entry and entry.get("r") in bands:
            found[name] = {"savings": round(float(entry["s"]) / 100, 2), "band": int(entry["r"])}
    return found


def dearest_rates(table: Mapping, rates: str = "on_demand_hourly") -> dict[str, float]:
    """Per type, the highest rate of any Region in the table (``rates``: ``on_demand_hourly`` or
    ``sagemaker_hourly``)."""
    dearest: dict[str, float] = {}
    for entry in table["regions"].values():
        for name, price in entry.get(rates, {}).items():
            dearest[name] = max(price, dearest.get(name, 0.0))
    return dearest


def refresh(table: Mapping, pricing: Any, ec2: Any, region: str, today: date, now: datetime,
            advisor: Optional[Mapping] = None, catalog: Optional[Mapping] = None) -> dict:
    """The table with ``region``'s entry refreshed, or added: a Region new to the table gets the dearest known rate
    for the types it does not offer and for SageMaker (which the refresh does not read), and no Spot discount for
    the families without Spot history there."""
    catalog = ACCELERATOR_CATALOG if catalog is None else catalog
    regions = table["regions"]
    known = regions.get(region)
    prices = {name: on_demand_price(pricing, name, region) for name in sorted(catalog)}
    found = {name: price for name, price in prices.items() if price is not None}
    missing = sorted(set(prices) - set(found))
    if known is not None:
        base, previous_discounts = known, known["spot_discount"]
        fallback = known["on_demand_hourly"]  # a type missing today keeps its old price
    else:
        base = {"sagemaker_hourly": dearest_rates(table, "sagemaker_hourly"),
                "sagemaker_note": "The dearest rate of any Region in the table (not refreshed from AWS)."}
        previous_discounts, fallback = {}, dearest_rates(table)
    discounts = {**{name.split(".")[0]: 0.0 for name in catalog}, **previous_discounts,
                 **spot_discounts(ec2, found, now)}
    entry = {**base, "retrieved": today.isoformat(),
             "source": f"AWS Price List Query API (AmazonEC2, Linux, Shared, On-Demand) and EC2 Spot price history, "
                       f"{region}, {today.isoformat()}; other rates kept from the previous table",
             "spot_discount_note": f"Per family, the lowest discount any size showed in any {region} AZ over the "
                                   f"day before {today.isoformat()} (conservative: estimates and the guard err high); "
                                   "0 where there was no Spot price.",
             "on_demand_hourly": {**{name: fallback[name] for name in missing if name in fallback}, **found},
             "spot_discount": discounts}
    for stale in ("missing", "new_types_note", "spot_hourly"):
        entry.pop(stale, None)
    entry["not_offered"] = missing  # priced for the guard; the advisor excludes them
    if advisor is not None:
        entry["spot_by_type"] = spot_by_type(advisor, region, catalog)
        entry["spot_by_type_source"] = f"AWS Spot Instance Advisor data ({SPOT_ADVISOR_URL}, Linux), {today.isoformat()}"
    return {**table, "regions": {**regions, region: entry}}


@dataclass(frozen=True)
class PriceTable:
    """A price table of the shipped table's shape, e.g. one a team refreshed itself
    (``python -m ml_platform_constructs prices refresh --region R --output prices.json``) and passes to
    ``BudgetGuard(price_table=PriceTable.from_file("prices.json"))``.

    Checked when created (``ValidationError``): ``regions`` maps Region names to entries with ``on_demand_hourly``
    (USD per hour, > 0), ``spot_discount`` (per family, 0 to below 1) and, optionally, ``spot_hourly`` (a measured
    Spot price per type, USD per hour, > 0).
    """

    table: Mapping[str, Any] = field(repr=False)
    source: str = "given"

    def __post_init__(self) -> None:
        problem = table_problem(self.table)
        if problem:
            raise ValidationError("PriceTable", "table", self.source, problem, REFRESH_FIX)

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "PriceTable":
        path = Path(path)
        try:
            table = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValidationError("PriceTable", "path", str(path), "an existing JSON file", REFRESH_FIX) from None
        except (OSError, json.JSONDecodeError) as error:
            raise ValidationError("PriceTable", "path", str(path), f"a readable JSON file ({error})", REFRESH_FIX) from None
        return cls(table, str(path))

    @classmethod
    def shipped(cls) -> "PriceTable":
        """The table this version of the library ships."""
        return cls(load_table(), "shipped with ml_platform_constructs")

    @property
    def regions(self) -> list[str]:
        return sorted(self.table["regions"])

    def to_json(self) -> str:
        return json.dumps(self.table, indent=1) + "\n"


def table_problem(table: Any) -> Optional[str]:
    """What makes ``table`` unusable as a price table, or None."""
    if not isinstance(table, Mapping) or not isinstance(table.get("regions"), Mapping) or not table["regions"]:
        return "no 'regions' object with at least one Region"
    for region, entry in table["regions"].items():
        rates = entry.get("on_demand_hourly") if isinstance(entry, Mapping) else None
        if not isinstance(rates, Mapping) or not rates:
            return f"Region {region} has no 'on_demand_hourly' rates"
        bad = [name for name, price in rates.items() if not isinstance(price, (int, float)) or price <= 0]
        if bad:
            return f"Region {region}: On-Demand rates must be positive USD per hour, not {bad[0]}={rates[bad[0]]!r}"
        discounts = entry.get("spot_discount")
        if not isinstance(discounts, Mapping):
            return f"Region {region} has no 'spot_discount' object"
        bad = [family for family, value in discounts.items() if not isinstance(value, (int, float)) or not 0 <= value < 1]
        if bad:
            return f"Region {region}: Spot discounts are fractions from 0 to below 1, not {bad[0]}={discounts[bad[0]]!r}"
        spot = entry.get("spot_hourly", {})
        if not isinstance(spot, Mapping):
            return f"Region {region}: 'spot_hourly' must map instance types to USD per hour"
        bad = [name for name, price in spot.items() if not isinstance(price, (int, float)) or price <= 0]
        if bad:
            return f"Region {region}: measured Spot prices must be positive USD per hour, not {bad[0]}={spot[bad[0]]!r}"
    return None
