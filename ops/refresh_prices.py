"""Refreshes the price table the library ships (job/ml_platform_job/prices.json) from AWS.

  python -m ops.refresh_prices [--region R]... [--no-spot-advisor]
      (default: every Region of the table and of config)

The table holds one entry per Region under "regions", every Region that offers catalog types; each environment,
its cost estimate, its budget guard and the GPU advisor are priced with its own Region's entry. What a refresh
reads, and how a Region new to the table is priced, is ml_platform_constructs.advice.price_table's (a team with the
library alone runs `python -m ml_platform_constructs prices refresh` for a table of its own). Needs AWS
credentials (pricing:GetProducts, ec2:DescribeSpotPriceHistory) and HTTPS to spot-bid-advisor.s3.amazonaws.com.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date, datetime, timezone
from pathlib import Path

import boto3
from ml_platform_constructs.advice.price_table import fetch_spot_advisor, refresh

from stacks import config as platform_config

TABLE = Path(__file__).resolve().parent.parent / "job" / "ml_platform_job" / "prices.json"


def default_regions(table: dict) -> list[str]:
    """Every Region the table prices (the library serves them all) and every Region config uses."""
    return sorted({*table["regions"], *(env.region for env in platform_config.load().environments.values())})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.refresh_prices", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--region", action="append", help="a Region to refresh (repeatable)")
    parser.add_argument("--no-spot-advisor", action="store_true", help="keep spot_by_type as it is")
    args = parser.parse_args(argv)
    table = json.loads(TABLE.read_text())
    regions = args.region or default_regions(table)
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
    from ops.terminal import entry_point

    entry_point(main)
