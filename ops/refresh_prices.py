"""Refreshes the price table (constructs/ml_platform_constructs/runtime/prices.json) from AWS.

  python -m ops.refresh_prices [--region R]...   (default: every Region config/environments.toml uses)

The table holds one entry per Region under "regions"; each environment, its cost estimate and its budget
guard are priced with its own Region's entry. On-Demand prices of every GPU catalog type come from the AWS Price List Query API (service AmazonEC2; the
API answers in us-east-1); each family's Spot discount from the last day of Spot price history in the Region
(the lowest discount any size shows in any AZ, so estimates err high). The other rates in the table are kept:
update them by hand from the AWS pricing pages when they change. Needs AWS credentials
(pricing:GetProducts, ec2:DescribeSpotPriceHistory).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

import boto3
from ml_platform_constructs import GPU_CATALOG

from stacks import config as platform_config

TABLE = Path(__file__).resolve().parent.parent / "constructs" / "ml_platform_constructs" / "runtime" / "prices.json"


def on_demand_price(pricing: Any, instance_type: str, region: str) -> Optional[float]:
    filters = {"instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
               "preInstalledSw": "NA", "capacitystatus": "Used"}
    response = pricing.get_products(ServiceCode="AmazonEC2", MaxResults=10, Filters=[
        {"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in filters.items()])
    for item in response["PriceList"]:
        terms = json.loads(item)["terms"].get("OnDemand", {})
        for term in terms.values():
            for dimension in term["priceDimensions"].values():
                price = float(dimension["pricePerUnit"]["USD"])
                if price > 0:
                    return price
    return None


def spot_discounts(ec2: Any, on_demand: dict[str, float], now: datetime) -> dict[str, float]:
    lowest: dict[str, float] = {}
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=list(on_demand), ProductDescriptions=["Linux/UNIX"], StartTime=now - timedelta(days=1))
    for page in pages:
        for entry in page["SpotPriceHistory"]:
            instance_type = entry["InstanceType"]
            discount = max(0.0, 1 - float(entry["SpotPrice"]) / on_demand[instance_type])
            family = instance_type.split(".")[0]
            lowest[family] = round(min(lowest.get(family, 1.0), discount), 2)
    return lowest


def refresh(table: dict, pricing: Any, ec2: Any, region: str, today: date, now: datetime) -> dict:
    """The table with ``region``'s entry refreshed (created from the first Region's entry when new)."""
    regions = table["regions"]
    previous = regions.get(region) or next(iter(regions.values()))
    prices = {name: on_demand_price(pricing, name, region) for name in sorted(GPU_CATALOG)}
    found = {name: price for name, price in prices.items() if price is not None}
    missing = sorted(set(prices) - set(found))
    entry = {**previous, "retrieved": today.isoformat(),
             "source": f"AWS Price List Query API (AmazonEC2, Linux, Shared, On-Demand) and EC2 Spot price history, "
                       f"{region}, {today.isoformat()}; SageMaker rates kept from the previous table",
             "spot_discount_note": f"Per family, the lowest discount any size showed in any {region} AZ over the "
                                   f"day before {today.isoformat()} (conservative: estimates and the guard err high).",
             "on_demand_hourly": {**previous["on_demand_hourly"], **found},
             "spot_discount": {**previous["spot_discount"], **spot_discounts(ec2, found, now)}}
    entry.pop("missing", None)
    if missing:
        entry["missing"] = missing
    return {**table, "regions": {**regions, region: entry}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--region", action="append", help="a Region to refresh (repeatable)")
    args = parser.parse_args(argv)
    regions = args.region or sorted({env.region for env in platform_config.load().environments.values()})
    table = json.loads(TABLE.read_text())
    pricing = boto3.client("pricing", region_name="us-east-1")  # the Price List Query API answers in us-east-1
    for region in regions:
        table = refresh(table, pricing, boto3.client("ec2", region_name=region), region, date.today(),
                        datetime.now(timezone.utc))
        entry = table["regions"][region]
        print(f"{region}: {len(entry['on_demand_hourly'])} On-Demand prices, {len(entry['spot_discount'])} Spot discounts")
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"-> {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
