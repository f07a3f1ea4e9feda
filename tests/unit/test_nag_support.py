"""suppress_checkov: a checkov suppression recorded in the template on the resource, with its reason."""

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template
from constructs import Construct

from ml_platform_constructs.foundation.nag_support import suppress_checkov

REASON = "A reason that says why this check does not apply here"


def test_suppressions_go_into_the_resource_metadata_in_checkovs_format():
    stack = Stack(App(), "S")
    queue = sqs.Queue(stack, "Q")
    suppress_checkov(queue, "CKV_AWS_27", REASON)  # an L2 construct: its default child
    suppress_checkov(queue.node.default_child, "CKV2_AWS_73", REASON + " too")
    suppress_checkov(queue, "CKV_AWS_27", REASON + ", restated")  # once per check: the last reason wins
    resource = next(iter(Template.from_stack(stack).find_resources("AWS::SQS::Queue").values()))
    assert resource["Metadata"]["checkov"] == {"skip": [{"id": "CKV2_AWS_73", "comment": REASON + " too"},
                                                        {"id": "CKV_AWS_27", "comment": REASON + ", restated"}]}


def test_a_construct_without_a_resource_is_refused():
    stack = Stack(App(), "S")
    with pytest.raises(TypeError, match="not a CloudFormation resource"):
        suppress_checkov(Construct(stack, "Empty"), "CKV_AWS_27", REASON)


@pytest.mark.parametrize("check_id,reason", [("CKV_AWS_27", "too short"), ("AwsSolutions-S1", REASON)])
def test_a_suppression_needs_a_check_id_and_a_real_reason(check_id, reason):
    with pytest.raises(ValueError, match="a check id such as CKV_AWS_116 and a reason"):
        suppress_checkov(sqs.Queue(Stack(App(), "S"), "Q"), check_id, reason)
