"""The emulator report's readers compare what the service APIs return with the template, so each aspect can fail;
what they cannot compare they mark "not checked" instead of "ok"."""

import pytest
from botocore.exceptions import ClientError

from ops.local import report
from ops.local.report import MISSING, PARTIAL, Finding, ResourceReport, StackReport


class Answers:
    """A boto3 client that answers each operation with a fixed response."""

    def __init__(self, **responses):
        self.responses = responses

    def __getattr__(self, operation):
        return lambda **kwargs: self.responses[operation]


def reader(logical_id, resources, physical, **clients):
    found = report.Reader(session=None, endpoint_url=None)
    found._clients.update(clients)
    found.resources, found.physical, found.logical_id = resources, physical, logical_id
    return found


TABLE = {"Table": {"Type": "AWS::EC2::RouteTable", "Properties": {"VpcId": {"Ref": "Vpc"}}},
         "S3": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"RouteTableIds": [{"Ref": "Table"}]}}}
PHYSICAL = {"Table": "rtb-1", "S3": "vpce-1", "Vpc": "vpc-1", "Group": "flow-logs"}


@pytest.mark.parametrize("routes,ok,detail", [
    ([{"GatewayId": "local"}, {"GatewayId": "vpce-1"}], True, "2 of 2 declared (local, vpce-1)"),
    ([{"GatewayId": "local"}], False, "1 of 2 declared (local)"),
    ([{"GatewayId": "local"}, {"GatewayId": "vpce-1"}, {"NatGatewayId": "nat-9"}], False,
     "3 of 2 declared (local, nat-9, vpce-1)"),
])
def test_route_table_routes_are_compared_with_the_template(routes, ok, detail):
    ec2 = Answers(describe_route_tables={"RouteTables": [{"VpcId": "vpc-1", "Routes": routes}]})
    findings = report._route_table(reader("Table", TABLE, PHYSICAL, ec2=ec2), "rtb-1", TABLE["Table"]["Properties"])
    assert (findings[1].ok, findings[1].detail) == (ok, detail)
    assert findings[0].ok  # the VPC


def role(principal):
    return {"AssumeRolePolicyDocument": {"Statement": [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": principal}]}}


@pytest.mark.parametrize("declared,ok", [
    ({"Service": "lambda.amazonaws.com"}, True),
    ({"Service": ["lambda.amazonaws.com"]}, True),  # one value or a one-item list: the same policy
    ({"Service": "ec2.amazonaws.com"}, False),
    ({"AWS": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::1:root"]]}}, None),
])
def test_role_trust_is_compared_and_a_computed_principal_is_not_checked(declared, ok):
    iam = Answers(get_role={"Role": role({"Service": "lambda.amazonaws.com"})})
    [trust] = report._iam_role(reader("Role", {}, {}, iam=iam), "role", role(declared))
    assert trust.ok is ok
    assert (trust.ok is None) == trust.detail.endswith("the template computes a principal or condition")


@pytest.mark.parametrize("delivered,ok", [("flow-logs", True), ("another-group", False)])
def test_flow_log_destination_is_compared_with_the_declared_log_group(delivered, ok):
    ec2 = Answers(describe_flow_logs={"FlowLogs": [{"TrafficType": "REJECT", "LogGroupName": delivered}]})
    props = {"TrafficType": "REJECT", "LogGroupName": {"Ref": "Group"}}
    destination = report._flow_log(reader("FlowLog", {}, PHYSICAL, ec2=ec2), "fl-1", props)[1]
    assert (destination.ok, destination.detail) == (ok, delivered)


def test_a_computed_flow_log_destination_is_not_checked():
    ec2 = Answers(describe_flow_logs={"FlowLogs": [{"TrafficType": "ALL", "LogDestination": "arn:aws:s3:::b"}]})
    props = {"TrafficType": "ALL", "LogDestination": {"Fn::GetAtt": ["Bucket", "Arn"]}}
    assert report._flow_log(reader("FlowLog", {}, {}, ec2=ec2), "fl-1", props)[1].ok is None


@pytest.mark.parametrize("subscribed,ok", [(["a@example.com"], True), (["b@example.com"], False), ([], False)])
def test_topic_subscriptions_are_compared_with_the_declared_ones(subscribed, ok):
    resources = {"Sub": {"Type": "AWS::SNS::Subscription", "Properties": {
        "Protocol": "email", "Endpoint": "a@example.com", "TopicArn": {"Ref": "Topic"}}}}
    sns = Answers(get_topic_attributes={"Attributes": {}},
                  list_subscriptions_by_topic={"Subscriptions": [{"Protocol": "email", "Endpoint": e} for e in subscribed]})
    findings = {f.aspect: f for f in report._sns_topic(reader("Topic", resources, {}, sns=sns), "arn:topic", {})}
    assert findings["subscriptions"].ok is ok
    assert findings["subscriptions"].detail.startswith(f"{len(subscribed)} of 1 declared (email a@example.com)")


def error(status, code):
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


def test_an_emulator_fault_leaves_the_aspect_not_checked_but_a_refusal_fails_it():
    assert report._unanswered("state", error(500, "InternalError")).ok is None
    refused = report._unanswered("read back", error(400, "ValidationException"))
    assert (refused.ok, refused.detail) == (False, "the emulator refused the read (ValidationException)")


def test_not_checked_is_shown_as_such_never_as_ok():
    resource = ResourceReport("Key", "AWS::KMS::Key", "k", findings=[
        Finding("rotation", True, "on"), Finding("state", None, "the emulator failed to answer (500)"),
        Finding("tags", False, "none")])
    text = report.format_reports([StackReport("dev-Core", "CREATE_COMPLETE", [resource])])
    assert "rotation: on; state: not checked, the emulator failed to answer (500); tags: none [NOT AS DECLARED]" in text


def test_gaps_name_each_aspect_not_as_declared_and_each_type_not_created():
    resources = [
        ResourceReport("Bucket", "AWS::S3::Bucket", "b", PARTIAL, [Finding("encryption", True, "aws:kms"),
                                                                  Finding("versioning", False, "off"),
                                                                  Finding("state", None, "?")]),
        ResourceReport("Alarm1", "AWS::CloudWatch::Alarm", None, MISSING),
        ResourceReport("Alarm2", "AWS::CloudWatch::Alarm", None, MISSING),
    ]
    reports = [StackReport("dev-Data", "CREATE_COMPLETE", resources)]
    assert report.gaps(reports) == {(PARTIAL, "dev-Data", "AWS::S3::Bucket", "versioning"),
                                    (MISSING, "dev-Data", "AWS::CloudWatch::Alarm", "")}
    assert report.gap_lines(reports) == ["  PARTIAL       1 x AWS::S3::Bucket: versioning not as declared",
                                         "  NOT CREATED  2 x AWS::CloudWatch::Alarm"]
