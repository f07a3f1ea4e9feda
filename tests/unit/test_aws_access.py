"""Operator commands: credentials, the environment's account and configured names are checked before any AWS call."""

import boto3
import pytest
from moto import mock_aws

from ops import aws_access, budget as budget_ops, dataset as dataset_ops, fleet as fleet_ops


@pytest.fixture
def dev(config):
    return config.environments["dev"]


def no_credentials(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role lookup on this machine


def test_without_credentials_the_command_says_what_is_missing_and_how_to_provide_it(dev, monkeypatch):
    no_credentials(monkeypatch)
    with pytest.raises(SystemExit) as error:
        aws_access.session_for(dev)
    message = str(error.value)
    assert message.startswith("error: no AWS credentials found for dev (account 111111111111, us-east-1)")
    assert "aws sso login --profile ml-platform-dev" in message and "AWS_PROFILE=ml-platform-dev" in message
    assert "Traceback" not in message


def test_a_missing_profile_is_reported_with_the_same_advice(dev, monkeypatch):
    no_credentials(monkeypatch)
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    with pytest.raises(SystemExit) as error:
        aws_access.session_for(dev)
    message = str(error.value)
    assert message.startswith("error: the AWS credentials for dev (account 111111111111, us-east-1) do not work (")
    assert "nosuch" in message and "aws sso login --profile ml-platform-dev" in message and "\n" not in message


def test_another_accounts_credentials_are_refused_naming_both_accounts(config, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "111111111111")  # dev's credentials
    with mock_aws():
        with pytest.raises(SystemExit) as error:
            fleet_ops.main(["scale", "prod", "training", "0"])
    message = str(error.value)
    assert "refusing to act on prod: its account is 333333333333" in message and "account 111111111111" in message


def test_the_right_accounts_credentials_give_a_session_in_its_region(dev, monkeypatch):
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "111111111111")
    with mock_aws():
        session = aws_access.session_for(dev)
    assert session.region_name == "us-east-1"


def test_a_fleet_config_does_not_know_is_refused_before_any_aws_call(monkeypatch):
    def no_aws(*args, **kwargs):
        raise AssertionError("AWS was called")
    monkeypatch.setattr(fleet_ops, "session_for", no_aws)
    with pytest.raises(SystemExit, match=r"dev has no fleet 'nosuch' in config/environments.toml \(known fleets: training\)"):
        fleet_ops.main(["scale", "dev", "nosuch", "2"])


def test_an_unknown_environment_is_one_line_not_a_traceback(monkeypatch):
    monkeypatch.setattr(budget_ops, "session_for", lambda *a, **k: pytest.fail("AWS was called"))
    with pytest.raises(SystemExit, match=r"^error: unknown environment 'qa': config/environments.toml declares "
                                         r"dev, staging, prod$"):
        budget_ops.main(["status", "qa"])


@pytest.mark.parametrize("command", [["build", "dev", "imagenet", "v1", "--prefix", "datasets/imagenet/",
                                      "--size-gib", "10"], ["list", "dev"]])
def test_dataset_commands_check_credentials_first(command, monkeypatch):
    no_credentials(monkeypatch)
    with pytest.raises(SystemExit, match="no AWS credentials found for dev"):
        dataset_ops.main(command)


def test_tag_activation_refuses_an_account_that_is_not_the_payer_of_the_environment(dev, monkeypatch):
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "999999999999")  # a management account, but dev's is not in its organization
    with mock_aws():
        with pytest.raises(SystemExit, match=r"^error: account 999999999999 is in no organization, so it pays only "
                                             r"for itself, not for dev \(account 111111111111\)"):
            aws_access.payer_session(dev)
        boto3.client("organizations", region_name="us-east-1").create_organization(FeatureSet="ALL")
        with pytest.raises(SystemExit, match=r"^error: dev's account 111111111111 is not in the organization of payer "
                                             r"account 999999999999 \(AccountNotFoundException\)"):
            aws_access.payer_session(dev)
