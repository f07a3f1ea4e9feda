"""The shipped price table covers every Region that offers the catalog's types; a Region it lacks is priced at the
dearest known rate; a team's own table is checked; the refresh (stubbed AWS) prices what a Region lacks high."""

import json
from datetime import date, datetime, timezone

import boto3
import pytest
from botocore.stub import Stubber

from ml_platform_constructs import ValidationError
from ml_platform_constructs.advice.gpu_catalog import ACCELERATOR_CATALOG
from ml_platform_constructs.advice.price_table import PriceTable, dearest_rates, refresh
from ml_platform_constructs.runtime.handlers.budget_guard import load_prices, load_table

TABLE = load_table()
# The Regions whose EC2 On-Demand rates list catalog GPU types (the source named in each entry), Local and
# Wavelength Zones aside.
GPU_REGIONS = {
    "af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2",
    "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-5", "ca-central-1", "eu-central-1",
    "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1",
    "me-central-1", "me-south-1", "sa-east-1", "us-east-1", "us-east-2", "us-gov-east-1", "us-gov-west-1",
    "us-west-1", "us-west-2"}


def test_every_region_that_offers_catalog_types_is_priced():
    assert GPU_REGIONS <= set(TABLE["regions"])


def test_eu_west_1_is_priced_at_its_own_rates_which_are_dearer_than_us_east_1s():
    ireland, virginia = load_prices("eu-west-1"), load_prices("us-east-1")
    assert not ireland.get("unpriced_region") and ireland["region"] == "eu-west-1"
    assert ireland["on_demand_hourly"]["g5.xlarge"] == 1.123 > virginia["on_demand_hourly"]["g5.xlarge"] == 1.006
    assert ireland["on_demand_hourly"]["g6e.xlarge"] > virginia["on_demand_hourly"]["g6e.xlarge"]


def test_every_region_prices_every_type_and_what_it_does_not_offer_at_the_dearest_rate():
    dearest = dearest_rates(TABLE)
    families = {e.family for e in ACCELERATOR_CATALOG.values()}
    for region, entry in TABLE["regions"].items():
        prices = load_prices(region)
        assert set(ACCELERATOR_CATALOG) <= set(prices["on_demand_hourly"]), region
        assert families <= set(prices["spot_discount"]), region
        assert prices["source"] and prices["retrieved"] and prices["spot_discount_note"], region
        assert prices["sagemaker_hourly"], region  # the cost estimate prices endpoints in any Region
        for name in entry["not_offered"]:
            assert entry["on_demand_hourly"][name] == dearest[name], (region, name)
        assert PriceTable({"regions": {region: entry}}).regions == [region]


def test_a_region_without_gpu_prices_is_priced_at_the_dearest_known_rate():
    prices = load_prices("mx-central-1")
    assert prices["unpriced_region"]
    dearest = dearest_rates(TABLE)
    assert all(prices["on_demand_hourly"][name] == dearest[name] for name in ACCELERATOR_CATALOG)
    assert prices["on_demand_hourly"]["g5.xlarge"] > load_prices("eu-west-1")["on_demand_hourly"]["g5.xlarge"]


# --- a team's own table --------------------------------------------------------------------------------------------

def test_a_teams_table_file_is_read_and_checked(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"regions": {"mx-central-1": {"on_demand_hourly": {"g5.xlarge": 1.3},
                                                             "spot_discount": {"g5": 0.4}}}}))
    assert PriceTable.from_file(path).regions == ["mx-central-1"]
    path.write_text(json.dumps({"regions": {"mx-central-1": {"on_demand_hourly": {"g5.xlarge": 0},
                                                             "spot_discount": {}}}}))
    with pytest.raises(ValidationError, match=r"On-Demand rates must be positive USD per hour, not g5.xlarge=0.*"
                                              r"Fix: write it with: python -m ml_platform_constructs prices refresh"):
        PriceTable.from_file(path)


def test_a_missing_table_file_says_how_to_write_it(tmp_path):
    with pytest.raises(ValidationError, match=r"PriceTable: path='.*nothing.json' is invalid: an existing JSON file. "
                                              r"Fix: write it with: python -m ml_platform_constructs prices refresh"):
        PriceTable.from_file(tmp_path / "nothing.json")


def test_the_shipped_table_is_a_valid_table():
    assert set(PriceTable.shipped().regions) == set(TABLE["regions"])


# --- refresh (AWS stubbed) -----------------------------------------------------------------------------------------

def price_item(price):
    return json.dumps({"terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"pricePerUnit": {"USD": str(price)}}}}}}})


def clients():
    credentials = {"aws_access_key_id": "t", "aws_secret_access_key": "t"}
    return (boto3.client("pricing", region_name="us-east-1", **credentials),
            boto3.client("ec2", region_name="us-east-1", **credentials))


CATALOG = {"g5.xlarge": None, "g5.2xlarge": None, "p5.48xlarge": None}
NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def test_refresh_reads_on_demand_prices_and_spot_discounts():
    pricing, ec2 = clients()
    old = {"on_demand_hourly": {"g5.xlarge": 1.0, "g5.2xlarge": 1.1, "p5.48xlarge": 50.0},
           "spot_discount": {"p5": 0.1, "g5": 0.6}}
    with Stubber(pricing) as pricing_stub, Stubber(ec2) as ec2_stub:
        for price in (1.212, 1.006, 55.04):  # sorted names: g5.2xlarge, g5.xlarge, p5.48xlarge
            pricing_stub.add_response("get_products", {"PriceList": [price_item(price)]})
        ec2_stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "g5.xlarge", "SpotPrice": "0.503"}, {"InstanceType": "g5.2xlarge", "SpotPrice": "0.9696"}]})
        table = refresh({"regions": {"us-east-1": old}}, pricing, ec2, "us-east-1", date(2026, 11, 29), NOW,
                        catalog=CATALOG)
    entry = table["regions"]["us-east-1"]
    assert entry["on_demand_hourly"] == {"g5.2xlarge": 1.212, "g5.xlarge": 1.006, "p5.48xlarge": 55.04}
    assert entry["spot_discount"] == {"p5": 0.1, "g5": 0.2}  # the lowest of the family: 1 - 0.9696/1.212; p5 kept
    assert entry["retrieved"] == "2026-11-29" and "us-east-1" in entry["source"] and entry["not_offered"] == []


def test_a_region_new_to_the_table_prices_what_it_lacks_at_the_dearest_rate_and_spot_as_on_demand():
    pricing, ec2 = clients()
    table = {"regions": {"us-east-1": {"on_demand_hourly": {"g5.xlarge": 1.0, "g5.2xlarge": 1.2, "p5.48xlarge": 55.0},
                                       "spot_discount": {"g5": 0.5, "p5": 0.4},
                                       "sagemaker_hourly": {"ml.m5.large": 0.115}},
                         "eu-west-1": {"on_demand_hourly": {"g5.xlarge": 1.1, "g5.2xlarge": 1.3, "p5.48xlarge": 60.0},
                                       "spot_discount": {"g5": 0.5, "p5": 0.4},
                                       "sagemaker_hourly": {"ml.m5.large": 0.128}}}}
    with Stubber(pricing) as pricing_stub, Stubber(ec2) as ec2_stub:
        for answer in ([price_item(1.3)], [price_item(1.2)], []):  # g5.2xlarge, g5.xlarge, no p5 there
            pricing_stub.add_response("get_products", {"PriceList": answer})
        ec2_stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "g5.xlarge", "SpotPrice": "0.6"}]})
        entry = refresh(table, pricing, ec2, "mx-central-1", date(2026, 11, 29), NOW,
                        catalog=CATALOG)["regions"]["mx-central-1"]
    assert entry["on_demand_hourly"] == {"g5.2xlarge": 1.3, "g5.xlarge": 1.2, "p5.48xlarge": 60.0}
    assert entry["not_offered"] == ["p5.48xlarge"]
    assert entry["spot_discount"] == {"g5": 0.5, "p5": 0.0}  # no Spot history for p5 there: priced as On-Demand
    assert entry["sagemaker_hourly"] == {"ml.m5.large": 0.128}


# --- the budget guard's table ----------------------------------------------------------------------------------------

def guard_stack(tmp_path, region, **props):
    from aws_cdk import Stack
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sns as sns

    from ml_platform_constructs import BudgetGuard
    from tests.conftest import ACCOUNT, new_app

    app = new_app(tmp_path, **{"aws:cdk:enable-asset-metadata": True})
    stack = Stack(app, "Team", env={"account": ACCOUNT, "region": region})
    BudgetGuard(stack, "Guard", monthly_limit=10, alerts=sns.Topic(stack, "T"), key=kms.Key(stack, "Key"),
                environment="dev", **props)
    return app, stack


def unpriced_warnings(stack):
    from aws_cdk.assertions import Annotations, Match

    return Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("price table has no"))


def test_a_guard_in_eu_west_1_is_priced_without_a_warning(tmp_path):
    _, stack = guard_stack(tmp_path, "eu-west-1")
    assert unpriced_warnings(stack) == []


def test_a_guard_in_a_region_the_table_lacks_warns_with_a_command_the_wheel_has(tmp_path):
    _, stack = guard_stack(tmp_path, "mx-central-1")
    [warning] = unpriced_warnings(stack)
    assert ("python -m ml_platform_constructs prices refresh --region mx-central-1 --output prices.json, then pass "
            "price_table=PriceTable.from_file('prices.json')") in warning.entry.data


def test_a_guard_given_a_teams_table_packages_it_for_its_function(tmp_path):
    from pathlib import Path

    own = {"regions": {"mx-central-1": {"on_demand_hourly": {"g5.xlarge": 1.31}, "spot_discount": {"g5": 0.4}}}}
    app, stack = guard_stack(tmp_path, "mx-central-1", price_table=PriceTable(own, "team"))
    assert unpriced_warnings(stack) == []
    assembly = app.synth()
    template = json.loads((Path(assembly.directory) / "Team.template.json").read_text())
    [function] = [r for name, r in template["Resources"].items()
                  if r["Type"] == "AWS::Lambda::Function" and name.startswith("GuardStopFunction")]
    packaged = Path(assembly.directory) / function["Metadata"]["aws:asset:path"]
    assert json.loads((packaged / "prices.json").read_text()) == own
    assert {p.name for p in packaged.iterdir()} == {"budget_guard.py", "pending_jobs.py", "prices.py", "prices.json"}


def test_a_guard_refuses_a_price_table_that_is_not_one(tmp_path):
    with pytest.raises(ValidationError, match=r"BudgetGuard: price_table='dict' is invalid: a PriceTable"):
        guard_stack(tmp_path, "us-east-1", price_table={"regions": {}})
