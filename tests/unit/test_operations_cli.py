"""`python -m ml_platform_constructs`: imports nothing of the CDK (no Node.js), takes --region before or after the
command, and ends every error in one line that says what is missing and how to provide it."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from ml_platform_constructs.operations import cli as operations

CLEAN_ENV = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")} | {
    "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true",
    "PATH": "/nonexistent"}  # no Node.js: Python runs by its full path


def run(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "ml_platform_constructs", *argv], capture_output=True, text=True,
                          env=env or CLEAN_ENV, timeout=60)


def test_the_cli_and_its_operations_import_nothing_of_the_cdk():
    code = ("import sys; from ml_platform_constructs.advice import budget_what_if, price_table; "
            "from ml_platform_constructs.operations import cli, jobs; cli.parser().format_help(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'aws_cdk', 'jsii', 'constructs'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=CLEAN_ENV, check=True)
    assert result.stdout.strip() == "[]"


def test_help_runs_without_node():
    result = run("--help")
    assert result.returncode == 0 and "prices refresh --region REGION" in result.stdout and result.stderr == ""


@pytest.mark.parametrize("argv, message", [
    (["budget", "status"], "error: no AWS Region: pass --region REGION (before or after the command"),
    (["budget", "status", "--region", "eu-west-1"], "error: no AWS credentials for eu-west-1: sign in (aws sso login"),
    (["drift-baseline", "missing.csv", "--endpoint", "e", "--output", "b.json"],
     "error: the sample missing.csv cannot be read (No such file or directory): give a CSV with a header, or JSON "
     "Lines, of training rows"),
    (["drift-baseline", "--endpoint", "e"], "error: python -m ml_platform_constructs drift-baseline: the following "
                                            "arguments are required: sample"),
    (["prices", "refresh", "--output", "p.json"], "error: python -m ml_platform_constructs prices refresh: name each "
                                                  "Region to refresh with --region REGION"),
], ids=["no-region", "no-credentials", "no-file", "bad-arguments", "no-refresh-region"])
def test_each_error_is_one_line_that_says_what_to_do(tmp_path, argv, message):
    result = subprocess.run([sys.executable, "-m", "ml_platform_constructs", *argv], capture_output=True, text=True,
                            env=CLEAN_ENV, cwd=tmp_path, timeout=60)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(message), result.stderr


class FakeSession:
    """A boto3 session with credentials whose clients are given (or a refusing one)."""

    def __init__(self, calls, clients, region_name=None):
        self.region_name, self._clients = region_name, clients
        calls.append(region_name)

    def get_credentials(self):
        return object()

    def client(self, name, region_name=None):
        return self._clients[name]


class Refusing:
    def __getattr__(self, operation):
        def refuse(*args, **kwargs):
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not\nallowed"}}, "DescribeThings")
        return refuse


def factory(calls, **clients):
    return lambda region_name=None: FakeSession(calls, clients, region_name)


@pytest.mark.parametrize("argv", [["--region", "eu-west-1", "budget", "status"],
                                  ["budget", "status", "--region", "eu-west-1"],
                                  ["budget", "--region", "eu-west-1", "status"]], ids=["before", "after", "between"])
def test_region_before_or_after_the_command(argv):
    calls = []
    with pytest.raises(SystemExit, match=r"^error: AWS refused DescribeThings: AccessDeniedException: not allowed "
                                         r"\(the credentials lack that permission\)$"):
        operations.main(argv, session_factory=factory(calls, autoscaling=Refusing(), batch=Refusing(), ec2=Refusing(),
                                                       ssm=Refusing()))
    assert calls == ["eu-west-1"]


def price_item(price):
    return json.dumps({"terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"pricePerUnit": {"USD": str(price)}}}}}}})


def test_prices_refresh_writes_a_table_the_guard_takes(tmp_path, monkeypatch):
    from ml_platform_constructs.advice import price_table

    monkeypatch.setattr(price_table, "ACCELERATOR_CATALOG", {"g5.xlarge": None, "p5.48xlarge": None})
    credentials = {"aws_access_key_id": "t", "aws_secret_access_key": "t"}
    pricing = boto3.client("pricing", region_name="us-east-1", **credentials)
    ec2 = boto3.client("ec2", region_name="mx-central-1", **credentials)
    calls = []
    with Stubber(pricing) as pricing_stub, Stubber(ec2) as ec2_stub:
        pricing_stub.add_response("get_products", {"PriceList": [price_item(1.2)]})  # g5.xlarge
        pricing_stub.add_response("get_products", {"PriceList": []})  # no p5 there
        ec2_stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "g5.xlarge", "SpotPrice": "0.6"}]})
        lines = operations.refresh_prices(
            lambda region: operations.Session(region, factory(calls, pricing=pricing, ec2=ec2)), ["mx-central-1"],
            output=tmp_path / "prices.json", spot_advisor=False, now=datetime(2026, 12, 1, tzinfo=timezone.utc))
    table = price_table.PriceTable.from_file(tmp_path / "prices.json")
    entry = table.table["regions"]["mx-central-1"]
    assert entry["on_demand_hourly"]["g5.xlarge"] == 1.2 and entry["not_offered"] == ["p5.48xlarge"]
    assert entry["on_demand_hourly"]["p5.48xlarge"] == price_table.dearest_rates(price_table.PriceTable.shipped().table)[
        "p5.48xlarge"]
    assert set(table.regions) > {"mx-central-1", "us-east-1", "eu-west-1"}  # the shipped Regions are kept
    assert lines[0] == ("mx-central-1: 1 types offered, not offered (priced at the dearest Region's rate): "
                        "p5.48xlarge") and "PriceTable.from_file" in lines[-1]
    assert calls == ["us-east-1", "mx-central-1"]
