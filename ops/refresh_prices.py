"""Refreshes the price table (constructs/ml_platform_constructs/runtime/prices.json) from AWS.

  python -m ops.refresh_prices [--region R]... [--no-spot-advisor]   (default: every Region config uses)

The table holds one entry per Region under "regions"; each environment, its cost estimate, its budget guard and
the GPU advisor are priced with its own Region's entry. Per Region it refreshes:

- on_demand_hourly: every catalog type (GPU and Trainium) from the AWS Price List Query API (service AmazonEC2;
  the API answers in us-east-1). A type with no price there is listed in "not_offered" and keeps its old price
  (the budget guard prices whatever runs; the advisor excludes what the Region does not offer);
- spot_discount: per family, the lowest discount any size showed in any AZ over the last day of EC2 Spot price
  history (conservative: the budget guard and the cost estimate err high);
- spot_by_type: per type, the Spot Instance Advisor's savings over On-Demand and its frequency-of-interruption
  band, from the public data file behind https://aws.amazon.com/ec2/spot/instance-advisor/ (SPOT_ADVISOR_URL;
  format: {"ranges": [{"index", "label", ...}], "spot_advisor": {region: {"Linux": {type: {"s": savings %,
  "r": band index}}}}}). The advisor prices Spot per type from these.

The other rates in the table are kept: update them by hand from the AWS pricing pages when they change. Needs
AWS credentials (pricing:GetProducts, ec2:DescribeSpotPriceHistory) and HTTPS to spot-bid-advisor.s3.amazonaws.com.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

import boto3
from ml_platform_constructs.gpu_catalog import ACCELERATOR_CATALOG as GPU_CATALOG  # every type priced: GPUs, Trainium

from stacks import config as platform_config

TABLE = Path(__file__).resolve().parent.parent / "constructs" / "ml_platform_constructs" / "runtime" / "prices.json"
SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"


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


def fetch_spot_advisor(url: str = SPOT_ADVISOR_URL, timeout: float = 60) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # a public S3 object: no credentials
        return json.load(response)


def spot_by_type(advisor: dict, region: str, types) -> dict[str, dict]:
    """The Advisor's Linux savings (fraction) and interruption band per catalog type in a Region."""
    bands = {item["index"] for item in advisor["ranges"]}
    linux = advisor["spot_advisor"].get(region, {}).get("Linux", {})
    found = {}
    for name in sorted(types):
        entry = linux.get(name)
        if entry and entry.get("r") in bands:
            found[name] = {"savings": round(float(entry["s"]) / 100, 2), "band": int(entry["r"])}
    return found


def refresh(table: dict, pricing: Any, ec2: Any, region: str, today: date, now: datetime,
            advisor: Optional[dict] = None) -> dict:
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
    for stale in ("missing", "new_types_note"):
        entry.pop(stale, None)
    entry["not_offered"] = missing  # kept at their old price for the guard; the advisor excludes them
    if advisor is not None:
        entry["spot_by_type"] = spot_by_type(advisor, region, GPU_CATALOG)
        entry["spot_by_type_source"] = f"AWS Spot Instance Advisor data ({SPOT_ADVISOR_URL}, Linux), {today.isoformat()}"
    return {**table, "regions": {**regions, region: entry}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.refresh_prices", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--region", action="append", help="a Region to refresh (repeatable)")
    parser.add_argument("--no-spot-advisor", action="store_true", help="keep spot_by_type as it is")
    args = parser.parse_args(argv)
    regions = args.region or sorted({env.region for env in platform_config.load().environments.values()})
    table = json.loads(TABLE.read_text())
    advisor = None if args.no_spot_advisor else fetch_spot_advisor()
    pricing = boto3.client("pricing", region_name="us-east-1")  # the Price List Query API answers in us-east-1
    for region in regions:
        table = refresh(table, pricing, boto3.client("ec2", region_name=region), region, date.today(),
                        datetime.now(timezone.utc), advisor)
        entry = table["regions"][region]
        print(f"{region}: {len(entry['on_demand_hourly'])} On-Demand prices, {len(entry['spot_discount'])} Spot "
              f"discounts, {len(entry.get('spot_by_type', {}))} types with Spot Advisor data, not offered: "
              f"{', '.join(entry['not_offered']) or 'none'}")
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"-> {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
