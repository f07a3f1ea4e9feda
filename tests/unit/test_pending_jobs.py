"""Pending job records (runtime/handlers/pending_jobs.py): forgetting a record that is gone already is what was wanted, any
other refusal is raised (mutation survivors of the guard's and retraining's tests)."""

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from ml_platform_constructs.runtime.handlers.pending_jobs import PendingJobs


def test_forgetting_a_record_that_is_gone_already_is_no_error():
    with mock_aws():
        ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        PendingJobs(ssm).forget("/ml-platform/pending-jobs/q/gone")  # ParameterNotFound


class Refusing:
    def __init__(self, error):
        self.error = error

    def delete_parameter(self, Name):  # noqa: N803 (boto3 names)
        raise self.error


@pytest.mark.parametrize("error", [
    ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "DeleteParameter"),
    ClientError({"Error": {"Code": "parameternotfound", "Message": "not this code"}}, "DeleteParameter"),
    ClientError({}, "DeleteParameter"),  # an answer without an error code
    RuntimeError("connection reset"),  # no response at all
])
def test_any_other_refusal_is_raised(error):
    with pytest.raises(type(error)):
        PendingJobs(Refusing(error)).forget("/ml-platform/pending-jobs/q/x")
