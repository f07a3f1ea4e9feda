"""What really exists after a deploy to the emulator, read back from the emulated service APIs.

moto reports a stack CREATE_COMPLETE even when it skipped resource types or properties, so this report
compares each template resource with what the service APIs return and never claims more than they show.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

CREATED, PARTIAL, NOT_READ, MISSING = "created", "PARTIAL", "not read back", "NOT CREATED"
_SESSION_LOCK = threading.Lock()


@dataclass
class Finding:
    aspect: str
    ok: Optional[bool]  # None: not checked (the report cannot compare it with the template, so it claims nothing)
    detail: str

    def __post_init__(self) -> None:
        if self.ok is not None:
            self.ok = bool(self.ok)


def not_checked(aspect: str, detail: str) -> Finding:
    return Finding(aspect, None, detail)


@dataclass
class ResourceReport:
    logical_id: str
    type: str
    physical_id: Optional[str]
    status: str = CREATED
    findings: list[Finding] = field(default_factory=list)
    note: str = ""


@dataclass
class StackReport:
    stack_name: str
    status: str
    resources: list[ResourceReport]

    def by_type(self, resource_type: str) -> list[ResourceReport]:
        return [r for r in self.resources if r.type == resource_type]


class Reader:
    """Reads resources back through boto3 clients bound to the emulator endpoint in the environment."""

    def __init__(self, session: boto3.session.Session, endpoint_url: Optional[str]) -> None:
        self._session = session
        self._endpoint_url = endpoint_url
        self._clients: dict[str, Any] = {}
        self.physical: dict[str, str] = {}
        self.resources: dict[str, dict] = {}  # the stack's template resources, for readers that need their neighbours
        self.logical_id = ""  # the resource being read

    def client(self, service: str) -> Any:
        if service not in self._clients:
            # No retries: an emulator error is an answer to report, not a fault to wait out. One client at a time from
            # the session, which is not thread-safe (report_assembly reads the stacks in threads); a client is.
            with _SESSION_LOCK:
                self._clients[service] = self._session.client(
                    service, endpoint_url=self._endpoint_url,
                    config=Config(retries={"max_attempts": 1, "mode": "standard"}))
        return self._clients[service]

    def neighbours(self, resource_type: str) -> list[dict]:
        """The stack's template resources of a type (e.g. the subscriptions of the topic being read)."""
        return [r for r in self.resources.values() if r["Type"] == resource_type]

    def literal(self, value: Any) -> Any:
        """A template value with Refs to this stack's resources replaced by their physical ids, else as is."""
        if isinstance(value, dict) and set(value) == {"Ref"}:
            return self.physical.get(value["Ref"], value)
        return value


def report_stack(session: boto3.session.Session, endpoint_url: str, stack_name: str,
                 template: dict[str, Any]) -> StackReport:
    reader = Reader(session, endpoint_url)
    cloudformation = reader.client("cloudformation")
    status = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["StackStatus"]
    paginator = cloudformation.get_paginator("list_stack_resources")
    for page in paginator.paginate(StackName=stack_name):
        for summary in page["StackResourceSummaries"]:
            if summary.get("LogicalResourceId"):
                reader.physical[summary["LogicalResourceId"]] = summary.get("PhysicalResourceId", "")
    reports = []
    reader.resources = template["Resources"]
    for logical_id, resource in template["Resources"].items():
        reader.logical_id = logical_id
        if resource["Type"] == "AWS::CDK::Metadata":
            continue
        report = ResourceReport(logical_id, resource["Type"], reader.physical.get(logical_id))
        if not report.physical_id:
            report.status = MISSING
            report.note = "the emulator did not create it (no CloudFormation support for this type), yet reported the stack complete"
        elif resource["Type"] in READERS:
            try:
                report.findings = READERS[resource["Type"]](reader, report.physical_id, resource.get("Properties", {}))
            except ClientError as error:
                report.findings = [_unanswered("read back", error)]
            report.status = CREATED if all(f.ok is not False for f in report.findings) else PARTIAL
        else:
            report.status = NOT_READ
            report.note = "listed by the stack; this report has no reader for the type"
        reports.append(report)
    return StackReport(stack_name, status, reports)


def report_assembly(session: boto3.session.Session, endpoint_url: str, assembly_dir: Path) -> list[StackReport]:
    """Reports every stack of a (nested) cloud assembly directory, in manifest order. The stacks are read at once,
    one thread each: the emulator answers one while this process reads another's answer."""
    stacks = stack_templates(assembly_dir)
    if not stacks:
        return []
    with ThreadPoolExecutor(max_workers=len(stacks)) as pool:
        return list(pool.map(lambda stack: report_stack(session, endpoint_url, stack[0],
                                                        json.loads(stack[1].read_text())), stacks))


def stack_templates(assembly_dir: Path) -> list[tuple[str, Path]]:
    """(stack name, template path) for every stack of a cloud assembly, nested stage assemblies included."""
    manifest = json.loads((assembly_dir / "manifest.json").read_text())
    found = []
    for artifact in manifest["artifacts"].values():
        if artifact["type"] == "aws:cloudformation:stack":
            found.append((artifact["properties"].get("stackName"), assembly_dir / artifact["properties"]["templateFile"]))
        elif artifact["type"] == "cdk:cloud-assembly":
            found.extend(stack_templates(assembly_dir / artifact["properties"]["directoryName"]))
    return found


def format_reports(reports: list[StackReport]) -> str:
    lines = []
    for stack in reports:
        counts = {s: sum(1 for r in stack.resources if r.status == s) for s in (CREATED, PARTIAL, NOT_READ, MISSING)}
        lines.append(f"\n{stack.stack_name}: {stack.status} as reported; of {len(stack.resources)} template resources: "
                     + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        for resource in stack.resources:
            detail = "; ".join(_shown(f) for f in resource.findings)
            lines.append(f"  {resource.status:<13} {resource.type:<38} {resource.logical_id}")
            if detail or resource.note:
                lines.append(f"  {'':<13} {detail or resource.note}")
    return "\n".join(lines)


def _shown(finding: Finding) -> str:
    if finding.ok is None:
        return f"{finding.aspect}: not checked, {finding.detail}"
    return f"{finding.aspect}: {finding.detail}" + ("" if finding.ok else " [NOT AS DECLARED]")


# --- readers: one per resource type, each comparing what the API returns with the template -------------------

def _ask(aspect: str, question: Callable[[], Finding]) -> Finding:
    """One aspect read back; an emulator error becomes a finding instead of hiding the others."""
    try:
        return question()
    except ClientError as error:
        return _unanswered(aspect, error)


def _unanswered(aspect: str, error: ClientError) -> Finding:
    """A refusal (not found, invalid) says the resource is not as declared; an emulator fault (HTTP 5xx) says
    nothing about it, so the aspect is not checked."""
    code = error.response["Error"].get("Code", "error")
    if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) >= 500 or code.startswith("5"):
        return not_checked(aspect, f"the emulator failed to answer ({code})")
    return Finding(aspect, False, f"the emulator refused the read ({code})")


def _kms_key(reader: Reader, key_id: str, props: dict) -> list[Finding]:
    kms = reader.client("kms")
    listed = {key["KeyId"] for key in kms.list_keys()["Keys"]}

    def rotation() -> Finding:
        enabled = kms.get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"]
        return Finding("rotation", enabled == bool(props.get("EnableKeyRotation")), "on" if enabled else "off")

    def policy() -> Finding:
        document = kms.get_key_policy(KeyId=key_id, PolicyName="default")["Policy"]
        # moto returns a template-created key's policy as an object rather than JSON text.
        statements = (json.loads(document) if isinstance(document, str) else document).get("Statement", [])
        wanted = {s["Sid"] for s in props.get("KeyPolicy", {}).get("Statement", []) if "Sid" in s}
        present = {s.get("Sid") for s in statements}
        return Finding("policy statements", wanted <= present, ", ".join(sorted(wanted & present)) or "none named")

    def tags() -> Finding:
        listed_tags = kms.list_resource_tags(KeyId=key_id)["Tags"]
        return _tags_finding({t["TagKey"]: t["TagValue"] for t in listed_tags}, props)

    return [Finding("listed", key_id in listed, "in ListKeys" if key_id in listed else "absent from ListKeys"),
            _ask("state", lambda: Finding("state", (state := kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"])
                                          == "Enabled", state)),
            _ask("rotation", rotation), _ask("policy statements", policy), _ask("tags", tags)]


def _kms_alias(reader: Reader, alias: str, props: dict) -> list[Finding]:
    aliases = {a["AliasName"]: a.get("TargetKeyId") for a in reader.client("kms").list_aliases()["Aliases"]}
    return [Finding("alias", alias in aliases, f"{alias} -> {aliases.get(alias, 'absent')}")]


def _sns_topic(reader: Reader, arn: str, props: dict) -> list[Finding]:
    sns = reader.client("sns")
    attributes = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
    encrypted = bool(attributes.get("KmsMasterKeyId"))
    findings = [Finding("encryption", encrypted == ("KmsMasterKeyId" in props),
                        f"KMS key {attributes['KmsMasterKeyId']}" if encrypted else "none")]
    subscriptions = sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"]
    declared = [*props.get("Subscription", []), *(
        r["Properties"] for r in reader.neighbours("AWS::SNS::Subscription")
        if r["Properties"].get("TopicArn") == {"Ref": reader.logical_id})]
    wanted = sorted(f"{d['Protocol']} {reader.literal(d['Endpoint'])}" for d in declared
                    if isinstance(reader.literal(d["Endpoint"]), str))
    found = sorted(f"{s['Protocol']} {s['Endpoint']}" for s in subscriptions)
    if len(wanted) == len(declared):
        findings.append(Finding("subscriptions", found == wanted,
                                f"{len(found)} of {len(declared)} declared" + (f" ({', '.join(wanted)})" if wanted else "")))
    else:  # an endpoint the template computes (a function's ARN): the count is what can be compared
        findings.append(Finding("subscriptions", len(found) == len(declared), f"{len(found)} of {len(declared)} declared"))
    findings.append(Finding("TLS-only policy", "aws:SecureTransport" in attributes.get("Policy", ""),
                            "present" if "aws:SecureTransport" in attributes.get("Policy", "") else "absent"))
    return findings


def _vpc(reader: Reader, vpc_id: str, props: dict) -> list[Finding]:
    vpc = reader.client("ec2").describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
    return [Finding("CIDR", vpc["CidrBlock"] == props.get("CidrBlock"), vpc["CidrBlock"])]


def _subnet(reader: Reader, subnet_id: str, props: dict) -> list[Finding]:
    subnet = reader.client("ec2").describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
    return [
        Finding("AZ", subnet["AvailabilityZone"] == props.get("AvailabilityZone"), subnet["AvailabilityZone"]),
        Finding("CIDR", subnet["CidrBlock"] == props.get("CidrBlock"), subnet["CidrBlock"]),
        Finding("public IPs on launch", not subnet.get("MapPublicIpOnLaunch"),
                "yes" if subnet.get("MapPublicIpOnLaunch") else "no"),
    ]


def _route_table(reader: Reader, table_id: str, props: dict) -> list[Finding]:
    """The table's route targets against the template's: the VPC's local route, each AWS::EC2::Route into the
    table, and each gateway endpoint that names the table."""
    table = reader.client("ec2").describe_route_tables(RouteTableIds=[table_id])["RouteTables"][0]
    this = {"Ref": reader.logical_id}
    wanted = ["local"]
    for route in reader.neighbours("AWS::EC2::Route"):
        if route["Properties"].get("RouteTableId") == this:
            target = next((v for k, v in route["Properties"].items() if k.endswith(("GatewayId", "InstanceId"))), "?")
            wanted.append(reader.literal(target))
    wanted += [reader.physical.get(logical_id, "?") for logical_id, endpoint in reader.resources.items()
               if endpoint["Type"] == "AWS::EC2::VPCEndpoint" and this in endpoint["Properties"].get("RouteTableIds", [])]
    if not all(isinstance(target, str) for target in wanted):
        return [not_checked("routes", "a route target the template computes")]
    found = sorted(r.get("GatewayId") or r.get("NatGatewayId") or r.get("InstanceId") or "?" for r in table["Routes"])
    return [Finding("VPC", table["VpcId"] == reader.literal(props.get("VpcId")), table["VpcId"]),
            Finding("routes", found == sorted(wanted), f"{len(found)} of {len(wanted)} declared ({', '.join(found)})")]


def _vpc_endpoint(reader: Reader, endpoint_id: str, props: dict) -> list[Finding]:
    endpoint = reader.client("ec2").describe_vpc_endpoints(VpcEndpointIds=[endpoint_id])["VpcEndpoints"][0]
    kind = endpoint["VpcEndpointType"]
    return [Finding("service", kind == props.get("VpcEndpointType", "Gateway"), f"{endpoint['ServiceName']} ({kind})")]


def _security_group(reader: Reader, group_id: str, props: dict) -> list[Finding]:
    group = reader.client("ec2").describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    ports = sorted({rule.get("FromPort", -1) for rule in group["IpPermissions"]})
    wanted = sorted({rule.get("FromPort", -1) for rule in props.get("SecurityGroupIngress", [])})
    return [Finding("ingress ports", ports == wanted, ", ".join(map(str, ports)) or "none")]


def _flow_log(reader: Reader, flow_log_id: str, props: dict) -> list[Finding]:
    flow_log = reader.client("ec2").describe_flow_logs(FlowLogIds=[flow_log_id])["FlowLogs"][0]
    destination = flow_log.get("LogGroupName") or flow_log.get("LogDestination", "?")
    wanted = reader.literal(props.get("LogGroupName", props.get("LogDestination")))
    return [Finding("traffic type", flow_log["TrafficType"] == props.get("TrafficType"), flow_log["TrafficType"]),
            Finding("destination", destination == wanted, destination) if isinstance(wanted, str)
            else not_checked("destination", f"{destination}; the template computes it")]


def _log_group(reader: Reader, name: str, props: dict) -> list[Finding]:
    groups = reader.client("logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
    group = next(g for g in groups if g["logGroupName"] == name)
    return [Finding("retention", group.get("retentionInDays") == props.get("RetentionInDays"),
                    f"{group.get('retentionInDays', 'never expires')} days"),
            Finding("KMS key", bool(group.get("kmsKeyId")) == ("KmsKeyId" in props), group.get("kmsKeyId", "none"))]


def _iam_role(reader: Reader, name: str, props: dict) -> list[Finding]:
    role = reader.client("iam").get_role(RoleName=name)["Role"]
    document = role["AssumeRolePolicyDocument"]
    statements = (json.loads(document) if isinstance(document, str) else document)["Statement"]
    principals = ", ".join(sorted(str(v) for s in statements for v in s.get("Principal", {}).values()))
    wanted = props.get("AssumeRolePolicyDocument", {}).get("Statement", [])
    if _computed(wanted):
        return [not_checked("trust", f"{principals}; the template computes a principal or condition")]
    return [Finding("trust", _statements(statements) == _statements(wanted), principals)]


def _computed(value: Any) -> bool:
    """Whether a template value holds an intrinsic function (Ref, Fn::...) that only CloudFormation resolves."""
    if isinstance(value, dict):
        return any(k == "Ref" or k.startswith("Fn::") or _computed(v) for k, v in value.items())
    return isinstance(value, list) and any(_computed(v) for v in value)


def _statements(statements: list[dict]) -> list[str]:
    """Policy statements in one canonical form: a single value and a one-item list are the same."""
    def canonical(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: canonical(v) for k, v in value.items()}
        return sorted(json.dumps(canonical(v) if isinstance(v, dict) else v, sort_keys=True)
                      for v in (value if isinstance(value, list) else [value]))
    return sorted(json.dumps(canonical(s), sort_keys=True) for s in statements)


def _iam_policy(reader: Reader, physical: str, props: dict) -> list[Finding]:
    roles = [reader.literal(role) for role in props.get("Roles", [])]
    name = props.get("PolicyName")
    attached = [role for role in roles if isinstance(role, str)
                and name in reader.client("iam").list_role_policies(RoleName=role)["PolicyNames"]]
    return [Finding("attached to", len(attached) == len(roles), ", ".join(attached) or "no role")]


def _s3_bucket(reader: Reader, name: str, props: dict) -> list[Finding]:
    s3 = reader.client("s3")

    def call(fn: Callable[..., Any], *keys: str) -> Any:
        try:
            value = fn(Bucket=name)
        except ClientError:
            return None
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    findings = []
    rules = call(s3.get_bucket_encryption, "ServerSideEncryptionConfiguration", "Rules") or []
    algorithm = rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] if rules else "none"
    wanted = props.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [{}])[0]
    findings.append(Finding("encryption", algorithm == wanted.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm"),
                            algorithm + (" with bucket key" if rules and rules[0].get("BucketKeyEnabled") else "")))
    if wanted.get("BucketKeyEnabled"):
        findings.append(Finding("S3 Bucket Key", bool(rules and rules[0].get("BucketKeyEnabled")),
                                "on" if rules and rules[0].get("BucketKeyEnabled") else "off"))
    if "VersioningConfiguration" in props:
        versioning = call(s3.get_bucket_versioning, "Status") or "off"
        findings.append(Finding("versioning", versioning == props["VersioningConfiguration"]["Status"], versioning))
    if "PublicAccessBlockConfiguration" in props:
        block = call(s3.get_public_access_block, "PublicAccessBlockConfiguration") or {}
        findings.append(Finding("public access block", block and all(block.values()), "all four on" if block and all(block.values()) else str(block or "none")))
    if "LoggingConfiguration" in props:
        target = call(s3.get_bucket_logging, "LoggingEnabled", "TargetBucket")
        findings.append(Finding("access logs", target == reader.literal(props["LoggingConfiguration"]["DestinationBucketName"]),
                                f"to {target}" if target else "off"))
    declared = props.get("LifecycleConfiguration", {}).get("Rules", [])
    if declared:
        applied = call(s3.get_bucket_lifecycle_configuration, "Rules") or []
        findings.append(Finding("lifecycle rules", len(applied) == len(declared), f"{len(applied)} of {len(declared)} applied"))
    if "IntelligentTieringConfigurations" in props:
        configs = call(s3.list_bucket_intelligent_tiering_configurations, "IntelligentTieringConfigurationList") or []
        findings.append(Finding("Intelligent-Tiering archive configurations",
                                len(configs) == len(props["IntelligentTieringConfigurations"]), f"{len(configs)} applied"))
    tags = call(s3.get_bucket_tagging, "TagSet") or []
    findings.append(_tags_finding({t["Key"]: t["Value"] for t in tags}, props))
    return findings


def _s3_bucket_policy(reader: Reader, physical: str, props: dict) -> list[Finding]:
    bucket = reader.literal(props.get("Bucket"))
    try:
        policy = reader.client("s3").get_bucket_policy(Bucket=bucket)["Policy"]
    except ClientError:
        return [Finding("policy", False, f"no policy on {bucket}")]
    return [Finding("TLS-only", "aws:SecureTransport" in policy, "deny without TLS present")]


def _auto_scaling_group(reader: Reader, name: str, props: dict) -> list[Finding]:
    groups = reader.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    group = groups[0]
    findings = [Finding("size", (str(group["MinSize"]), str(group["MaxSize"])) == (props.get("MinSize"), props.get("MaxSize")),
                        f"min {group['MinSize']}, max {group['MaxSize']}, desired {group['DesiredCapacity']}")]
    declared = props.get("MixedInstancesPolicy", {})
    policy = group.get("MixedInstancesPolicy", {})
    wanted_types = [o["InstanceType"] for o in declared.get("LaunchTemplate", {}).get("Overrides", [])]
    types = [o.get("InstanceType") for o in policy.get("LaunchTemplate", {}).get("Overrides", [])]
    findings.append(Finding("instance types", types == wanted_types, ", ".join(t or "?" for t in types) or "none"))
    strategy = policy.get("InstancesDistribution", {}).get("SpotAllocationStrategy")
    wanted = declared.get("InstancesDistribution", {}).get("SpotAllocationStrategy")
    findings.append(Finding("Spot allocation", strategy == wanted, strategy or "none"))
    findings.append(Finding("capacity rebalance", bool(group.get("CapacityRebalance")) == bool(props.get("CapacityRebalance")),
                            "on" if group.get("CapacityRebalance") else "off"))
    return findings


def _launch_template(reader: Reader, template_id: str, props: dict) -> list[Finding]:
    versions = reader.client("ec2").describe_launch_template_versions(LaunchTemplateId=template_id)["LaunchTemplateVersions"]
    data = versions[-1]["LaunchTemplateData"]
    wanted = props.get("LaunchTemplateData", {})
    tokens = data.get("MetadataOptions", {}).get("HttpTokens")
    findings = [Finding("IMDSv2", tokens == wanted.get("MetadataOptions", {}).get("HttpTokens"), f"HttpTokens {tokens}")]
    ebs = (data.get("BlockDeviceMappings") or [{}])[0].get("Ebs", {})
    findings.append(Finding("root volume", bool(ebs.get("Encrypted")) == bool(
        (wanted.get("BlockDeviceMappings") or [{}])[0].get("Ebs", {}).get("Encrypted")),
        f"{ebs.get('VolumeType', '?')} {ebs.get('VolumeSize', '?')} GiB, encrypted {ebs.get('Encrypted')}"))
    return findings


def _events_rule(reader: Reader, name: str, props: dict) -> list[Finding]:
    rule_name = name.split("|")[-1].split("/")[-1]
    rule = reader.client("events").describe_rule(Name=rule_name)
    targets = reader.client("events").list_targets_by_rule(Rule=rule_name)["Targets"]
    if "ScheduleExpression" in props:
        trigger = Finding("schedule", rule.get("ScheduleExpression") == props["ScheduleExpression"],
                          rule.get("ScheduleExpression", "none"))
    else:
        pattern = json.loads(rule.get("EventPattern", "{}"))
        wanted = props.get("EventPattern", {}).get("detail-type")
        trigger = Finding("pattern", pattern.get("detail-type") == wanted, ", ".join(pattern.get("detail-type", [])))
    return [trigger, Finding("targets", len(targets) == len(props.get("Targets", [])), f"{len(targets)}")]


def _sagemaker_model(reader: Reader, name: str, props: dict) -> list[Finding]:
    model = reader.client("sagemaker").describe_model(ModelName=name.split("/")[-1])
    image = model.get("PrimaryContainer", {}).get("Image")
    return [Finding("image", image == props.get("PrimaryContainer", {}).get("Image"), image or "none")]


def _sagemaker_endpoint_config(reader: Reader, name: str, props: dict) -> list[Finding]:
    config = reader.client("sagemaker").describe_endpoint_config(EndpointConfigName=name.split("/")[-1])
    capture = config.get("DataCaptureConfig", {})
    wanted = props.get("DataCaptureConfig", {})
    return [Finding("data capture", capture.get("InitialSamplingPercentage") == wanted.get("InitialSamplingPercentage"),
                    f"{'on' if capture.get('EnableCapture') else 'off'}, {capture.get('InitialSamplingPercentage', '?')}% "
                    f"to {capture.get('DestinationS3Uri', '?')}"),
            Finding("instance type", [v["InstanceType"] for v in config["ProductionVariants"]] ==
                    [v["InstanceType"] for v in props.get("ProductionVariants", [])],
                    ", ".join(v["InstanceType"] for v in config["ProductionVariants"]))]


def _sagemaker_endpoint(reader: Reader, name: str, props: dict) -> list[Finding]:
    endpoint = reader.client("sagemaker").describe_endpoint(EndpointName=name.split("/")[-1])
    return [Finding("status", endpoint["EndpointStatus"] == "InService", endpoint["EndpointStatus"]),
            Finding("name", endpoint["EndpointName"] == props.get("EndpointName"), endpoint["EndpointName"])]


def _lambda_function(reader: Reader, name: str, props: dict) -> list[Finding]:
    function = reader.client("lambda").get_function_configuration(FunctionName=name)
    return [Finding("runtime", function["Runtime"] == props.get("Runtime"), f"{function['Runtime']} {function['Handler']}"),
            Finding("environment", set(function.get("Environment", {}).get("Variables", {})) ==
                    set(props.get("Environment", {}).get("Variables", {})), "variables as declared")]


def _instance_profile(reader: Reader, name: str, props: dict) -> list[Finding]:
    profile = reader.client("iam").get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    return [Finding("roles", len(profile["Roles"]) == len(props.get("Roles", [])),
                    ", ".join(r["RoleName"] for r in profile["Roles"]) or "none")]


def _dashboard(reader: Reader, name: str, props: dict) -> list[Finding]:
    body = json.loads(reader.client("cloudwatch").get_dashboard(DashboardName=name)["DashboardBody"])
    return [Finding("widgets", bool(body.get("widgets")), str(len(body.get("widgets", []))))]


def _batch_compute_environment(reader: Reader, arn: str, props: dict) -> list[Finding]:
    environment = reader.client("batch").describe_compute_environments(computeEnvironments=[arn])["computeEnvironments"][0]
    resources, wanted = environment.get("computeResources", {}), props.get("ComputeResources", {})
    return [
        Finding("capacity", (resources.get("type"), resources.get("minvCpus"), resources.get("maxvCpus")) == (
            wanted.get("Type"), wanted.get("MinvCpus"), wanted.get("MaxvCpus")),
            f"{resources.get('type')}, {resources.get('minvCpus')}-{resources.get('maxvCpus')} vCPUs"),
        Finding("instance types", resources.get("instanceTypes") == wanted.get("InstanceTypes"),
                ", ".join(resources.get("instanceTypes", [])) or "none"),
        Finding("allocation", resources.get("allocationStrategy") == wanted.get("AllocationStrategy"),
                resources.get("allocationStrategy") or "none"),
        Finding("state", environment.get("state") == "ENABLED", environment.get("state", "?")),
    ]


def _batch_job_queue(reader: Reader, arn: str, props: dict) -> list[Finding]:
    queue = reader.client("batch").describe_job_queues(jobQueues=[arn])["jobQueues"][0]
    order = [entry["order"] for entry in queue.get("computeEnvironmentOrder", [])]
    return [Finding("compute environments", order == [e["Order"] for e in props.get("ComputeEnvironmentOrder", [])],
                    f"{len(order)} in order {order}"),
            Finding("state", queue.get("state") == "ENABLED", queue.get("state", "?"))]


def _batch_job_definition(reader: Reader, arn: str, props: dict) -> list[Finding]:
    definition = reader.client("batch").describe_job_definitions(jobDefinitions=[arn])["jobDefinitions"][0]
    retry, wanted = definition.get("retryStrategy", {}), props.get("RetryStrategy", {})
    container = definition.get("containerProperties") or {}
    requirements = {r["type"]: r["value"] for r in container.get("resourceRequirements", [])}
    wanted_requirements = {r["Type"]: r["Value"] for r in props.get("ContainerProperties", {}).get("ResourceRequirements", [])}
    return [Finding("retry strategy", (retry.get("attempts"), len(retry.get("evaluateOnExit", []))) == (
                        wanted.get("Attempts"), len(wanted.get("EvaluateOnExit", []))),
                    f"{retry.get('attempts')} attempts, {len(retry.get('evaluateOnExit', []))} exit rules"),
            Finding("resources", requirements == wanted_requirements,
                    ", ".join(f"{k} {v}" for k, v in sorted(requirements.items())) or definition.get("type", "?"))]


def _tags_finding(actual: dict[str, str], props: dict) -> Finding:
    wanted = {t["Key"]: t["Value"] for t in props.get("Tags", []) if isinstance(t.get("Value"), str)}
    missing = sorted(set(wanted) - set(actual))
    return Finding("tags", not missing, ", ".join(f"{k}={v}" for k, v in sorted(actual.items())) or "none")


READERS: dict[str, Callable[[Reader, str, dict], list[Finding]]] = {
    "AWS::KMS::Key": _kms_key,
    "AWS::KMS::Alias": _kms_alias,
    "AWS::SNS::Topic": _sns_topic,
    "AWS::EC2::VPC": _vpc,
    "AWS::EC2::Subnet": _subnet,
    "AWS::EC2::RouteTable": _route_table,
    "AWS::EC2::VPCEndpoint": _vpc_endpoint,
    "AWS::EC2::SecurityGroup": _security_group,
    "AWS::EC2::FlowLog": _flow_log,
    "AWS::Logs::LogGroup": _log_group,
    "AWS::IAM::Role": _iam_role,
    "AWS::IAM::Policy": _iam_policy,
    "AWS::S3::Bucket": _s3_bucket,
    "AWS::S3::BucketPolicy": _s3_bucket_policy,
    "AWS::AutoScaling::AutoScalingGroup": _auto_scaling_group,
    "AWS::EC2::LaunchTemplate": _launch_template,
    "AWS::Events::Rule": _events_rule,
    "AWS::IAM::InstanceProfile": _instance_profile,
    "AWS::CloudWatch::Dashboard": _dashboard,
    "AWS::SageMaker::Model": _sagemaker_model,
    "AWS::SageMaker::EndpointConfig": _sagemaker_endpoint_config,
    "AWS::SageMaker::Endpoint": _sagemaker_endpoint,
    "AWS::Batch::ComputeEnvironment": _batch_compute_environment,
    "AWS::Batch::JobQueue": _batch_job_queue,
    "AWS::Batch::JobDefinition": _batch_job_definition,
    "AWS::Lambda::Function": _lambda_function,
}


# What moto 5.2 does not do with the dev environment's templates, pinned by tests/emulator (a new gap, or one that
# closes with a moto upgrade, fails them): (status, stack, type, aspect not as declared). ./platform up calls the
# gaps it finds expected only when they are these (by type and aspect, whatever the stack).
NOT_CREATED_TYPES = {  # moto has no CloudFormation support for these types (they exist only in a real account)
    "dev-Core": ["AWS::SNS::Subscription", "AWS::SNS::TopicPolicy"],
    "dev-Data": ["AWS::Rbin::Rule", "AWS::S3::BucketPolicy"],
    "dev-Compute": ["AWS::AutoScaling::LifecycleHook", "AWS::CloudWatch::Alarm", "AWS::Lambda::Permission"],
    "dev-Serving": ["AWS::ApplicationAutoScaling::ScalableTarget", "AWS::ApplicationAutoScaling::ScalingPolicy",
                    "AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm", "AWS::Lambda::Permission",
                    "AWS::S3::BucketPolicy"],
    "dev-Governance": ["AWS::Budgets::Budget", "AWS::CloudWatch::Alarm", "AWS::Lambda::EventInvokeConfig",
                       "AWS::Lambda::Permission", "AWS::SNS::Subscription", "AWS::SNS::TopicPolicy",
                       "AWS::SQS::QueuePolicy"],
}
_BUCKET = ["S3 Bucket Key", "access logs", "lifecycle rules", "public access block", "versioning"]
_TOPIC = ["TLS-only policy", "subscriptions"]  # the topic policy and the subscriptions are not created
NOT_APPLIED = {  # created, but these aspects read back not as declared
    ("dev-Core", "AWS::Logs::LogGroup"): ["KMS key"], ("dev-Core", "AWS::SNS::Topic"): _TOPIC,
    ("dev-Data", "AWS::S3::Bucket"): _BUCKET,
    ("dev-Compute", "AWS::AutoScaling::AutoScalingGroup"): ["capacity rebalance"],
    ("dev-Compute", "AWS::Logs::LogGroup"): ["KMS key"],
    ("dev-Serving", "AWS::Logs::LogGroup"): ["KMS key"], ("dev-Serving", "AWS::S3::Bucket"): _BUCKET,
    ("dev-Serving", "AWS::SageMaker::Endpoint"): ["name"],
    ("dev-Governance", "AWS::Logs::LogGroup"): ["KMS key"], ("dev-Governance", "AWS::SNS::Topic"): _TOPIC,
}
KNOWN_GAPS = {(MISSING, stack, type_, "") for stack, types in NOT_CREATED_TYPES.items() for type_ in types} | {
    (PARTIAL, stack, type_, aspect) for (stack, type_), aspects in NOT_APPLIED.items() for aspect in aspects}


def gaps(reports: list[StackReport]) -> set[tuple[str, str, str, str]]:
    """What the emulator did not do, as (status, stack, resource type, aspect): each aspect of a PARTIAL resource
    that is not as declared, and each type it did not create (aspect "")."""
    found = set()
    for stack in reports:
        for resource in stack.resources:
            if resource.status == MISSING:
                found.add((MISSING, stack.stack_name, resource.type, ""))
            elif resource.status == PARTIAL:
                found.update((PARTIAL, stack.stack_name, resource.type, f.aspect) for f in resource.findings if f.ok is False)
    return found


def gap_lines(reports: list[StackReport], width: int = 110) -> list[str]:
    """The PARTIAL and NOT CREATED resources in a few lines: PARTIAL per type with the aspects not applied, NOT
    CREATED per type with its count."""
    lines = []
    partial: dict[str, list[ResourceReport]] = {}
    missing: dict[str, int] = {}
    for stack in reports:
        for resource in stack.resources:
            if resource.status == PARTIAL:
                partial.setdefault(resource.type, []).append(resource)
            elif resource.status == MISSING:
                missing[resource.type] = missing.get(resource.type, 0) + 1
    for resource_type, resources in sorted(partial.items()):
        aspects = dict.fromkeys(f.aspect for r in resources for f in r.findings if f.ok is False)
        lines.append(f"  {PARTIAL:<12} {len(resources):>2} x {resource_type}: {', '.join(aspects)} not as declared")
    packed = ""
    for resource_type, count in sorted(missing.items(), key=lambda item: (-item[1], item[0])):
        entry = f"{count} x {resource_type}"
        if packed and len(packed) + len(entry) + 2 > width - 15:
            lines.append(f"  {MISSING:<12} {packed}")
            packed = ""
        packed = f"{packed}, {entry}" if packed else entry
    if packed:
        lines.append(f"  {MISSING:<12} {packed}")
    return lines


def unknown_gaps(reports: list[StackReport]) -> list[str]:
    """The gaps that are not moto's known ones (KNOWN_GAPS, by type and aspect): "TYPE" for a type not created,
    "TYPE: aspect" for a setting not applied."""
    known = {(status, type_, aspect) for status, _, type_, aspect in KNOWN_GAPS}
    return sorted({f"{type_}: {aspect}" if aspect else type_
                   for status, _, type_, aspect in gaps(reports) if (status, type_, aspect) not in known})
