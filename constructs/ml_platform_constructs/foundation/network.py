"""The platform's network: a VPC it creates (PlatformNetwork) or one another team owns (ImportedNetwork)."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Optional, Sequence

from aws_cdk import Acknowledgment, Annotations, RemovalPolicy, Stack, Token, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from ..errors import ValidationError, refusal_leaves_no_node
from .platform_key import allow_log_groups

# What instances in private subnets must reach without a NAT gateway:
# Session Manager (ssm, ssmmessages; ec2messages for SSM Agent before 3.3.40.0):
#   https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-create-vpc.html
# CloudWatch agent metrics and logs:
#   https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-interface-VPC.html
# EC2 (the agent's DescribeTags for the AutoScalingGroupName dimension) and Auto Scaling (the fleet watcher
# completing the checkpoint lifecycle hook).
DEFAULT_INTERFACE_ENDPOINTS = (
    ec2.InterfaceVpcEndpointAwsService.SSM,
    ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
    ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    ec2.InterfaceVpcEndpointAwsService.EC2,
    ec2.InterfaceVpcEndpointAwsService.AUTOSCALING,
)
# What a TrainingQueue's ECS container instances need besides the defaults when there is no NAT gateway (the
# ECS agent, image pulls): https://docs.aws.amazon.com/AmazonECS/latest/developerguide/vpc-endpoints.html
QUEUE_INTERFACE_ENDPOINTS = (
    ec2.InterfaceVpcEndpointAwsService.ECS,
    ec2.InterfaceVpcEndpointAwsService.ECS_AGENT,
    ec2.InterfaceVpcEndpointAwsService.ECS_TELEMETRY,
    ec2.InterfaceVpcEndpointAwsService.ECR,
    ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
)

# What each construct's instances call, as endpoint short names, when their subnets are isolated (no NAT gateway:
# they reach AWS only through VPC endpoints). Checked at synth for a VPC of the app (``require_endpoints``); each
# construct's page lists the same names. An imported VPC's endpoints cannot be seen from the app: not checked.
ENDPOINTS_WITHOUT_EGRESS: dict[str, tuple[str, ...]] = {
    # ECS agent (ecs, ecs-agent, ecs-telemetry), image pulls (ecr.api, ecr.dkr), image layers (s3: ECR's
    # GetDownloadUrlForLayer answers with a pre-signed S3 URL,
    # https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_GetDownloadUrlForLayer.html), job logs (logs),
    # the CloudWatch agent's GPU metrics that the idle and memory alarms read (monitoring).
    "TrainingQueue": (*(e.short_name for e in QUEUE_INTERFACE_ENDPOINTS), "logs", "monitoring", "s3"),
    # The CloudWatch agent's install (the Region's agent bucket), datasets and checkpoints (s3); its GPU metrics and
    # the watcher's JobRunning (monitoring); the agent's DescribeTags for the group dimension (ec2); the watcher's
    # CompleteLifecycleAction (autoscaling).
    "SpotGpuFleet": ("autoscaling", "ec2", "monitoring", "s3"),
    # Run Command's agent (ssm, ssmmessages: https://docs.aws.amazon.com/systems-manager/latest/userguide/
    # systems-manager-setting-up-messageAPIs.html) and the dataset copy (s3).
    "DatasetSnapshotBuilder": ("s3", "ssm", "ssmmessages"),
    # The model artifact (https://docs.aws.amazon.com/sagemaker/latest/dg/host-vpc.html#host-vpc-s3).
    "MonitoredEndpoint": ("s3",),
}
# Session Manager, the instances' only way in (no SSH, no inbound rule):
# https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-create-vpc.html
SESSION_MANAGER_ENDPOINTS = ("ssm", "ssmmessages")
NO_SESSION_MANAGER_WARNING = "ml-platform:no-session-manager-endpoints"
UNCHECKED_ENDPOINTS_WARNING = "ml-platform:imported-vpc-endpoints-unchecked"

_AZ = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d)[a-z]$")


def _validate_azs(construct: str, azs: Sequence[str], region: str) -> None:
    if not azs:
        raise ValidationError(construct, "availability_zones", list(azs), "at least one Availability Zone",
                              "list the AZs the environment uses, e.g. ['us-east-1a', 'us-east-1b']")
    if len(set(azs)) != len(azs):
        raise ValidationError(construct, "availability_zones", list(azs), "each AZ once", "remove the duplicate AZ")
    for az in azs:
        match = _AZ.match(az)
        if not match:
            raise ValidationError(construct, "availability_zones", az, "an AZ name such as 'us-east-1a'", "use AZ names, not AZ ids")
        if not Token.is_unresolved(region) and match.group(1) != region:
            raise ValidationError(construct, "availability_zones", az, f"an AZ of the stack's Region {region}",
                                  f"use AZs named {region}a, {region}b, ...")


def availability_zone_context(*, account: str, region: str, availability_zones: Sequence[str]) -> dict:
    """The context that pins a Region's AZs for an account-bound app: ``App(context=availability_zone_context(...))``.

    Any ``ec2.Vpc`` in a stack bound to an account and Region (a team's own as well as ``PlatformNetwork``'s) reads
    the stack's AZs, which CDK otherwise looks up with AWS credentials at synth; with this context (CDK's AZ provider
    key) it never does: https://docs.aws.amazon.com/cdk/v2/guide/context.html
    """
    return {f"availability-zones:account={account}:region={region}": list(availability_zones)}


def _require_no_az_lookup(stack: Stack, azs: Sequence[str]) -> None:
    """ec2.Vpc reads ``stack.availability_zones``; in an account-bound stack that is a context lookup unless the
    stack overrides the property (CDK's documented way to choose AZs:
    https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.Stack.html#availabilityzones) or the lookup's context
    key is already set (https://docs.aws.amazon.com/cdk/v2/guide/context.html)."""
    if Token.is_unresolved(stack.account) or Token.is_unresolved(stack.region):
        return  # environment-agnostic: CDK uses Fn::GetAZs, no lookup
    if type(stack).availability_zones is not Stack.availability_zones:
        return
    key = f"availability-zones:account={stack.account}:region={stack.region}"
    if stack.node.try_get_context(key) is not None:
        return
    raise ValidationError(
        "PlatformNetwork", "availability_zones", list(azs),
        f"AZs that CDK can know without a lookup: stack {stack.stack_name} is bound to account {stack.account} "
        f"and Region {stack.region}, and CDK's ec2.Vpc reads the stack's AZs, which would be looked up (with AWS "
        "credentials) at synth",
        "pin them in the app: App(context=ml_platform_constructs.availability_zone_context(account=..., region=..., "
        f"availability_zones={list(azs)!r})), or override the availability_zones property of your Stack to return them")


PUBLIC_SUBNETS_WARNING = "ml-platform:public-subnets"


def selected_subnets(vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection]) -> list[ec2.ISubnet]:
    """The subnets ``vpc_subnets`` selects, as aws-cdk-lib's constructs select them (default: private ones first,
    then isolated, then public)."""
    # jsii structs keep their fields in _values; select_subnets takes them as keyword arguments.
    return list(vpc.select_subnets(**(vpc_subnets._values if vpc_subnets else {})).subnets)


def missing_interface_endpoints(vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection],
                                needed: Sequence[str]) -> list[str]:
    """The services of ``needed`` (endpoint short names such as ``ecr.dkr``) that the selected isolated subnets of
    ``vpc`` cannot reach (no NAT gateway: clients there reach AWS only through VPC endpoints); [] when no selected
    subnet is isolated, and for an imported VPC, whose endpoints cannot be seen from here.

    An endpoint counts wherever in the app it is defined (``vpc.add_interface_endpoint``, or a construct of its own
    given the VPC): an interface endpoint only with private DNS (without it the SDKs call the public names and time
    out), a gateway endpoint only when its route tables are those of every selected isolated subnet
    (https://docs.aws.amazon.com/vpc/latest/privatelink/gateway-endpoints.html: traffic uses it only from subnets
    whose route table has its route)."""
    if not isinstance(vpc, ec2.Vpc):
        return []
    isolated = {s.subnet_id for s in vpc.isolated_subnets}
    subnets = [s for s in selected_subnets(vpc, vpc_subnets) if s.subnet_id in isolated]
    if not subnets:
        return []
    stack = Stack.of(vpc)
    tables = {s.route_table.route_table_id for s in subnets}
    reachable = []
    for endpoint in vpc.node.root.node.find_all():
        if not isinstance(endpoint, ec2.CfnVPCEndpoint) or endpoint.vpc_id != vpc.vpc_id:
            continue
        service = json.dumps(stack.resolve(endpoint.service_name))
        if endpoint.vpc_endpoint_type == "Gateway":
            routes = endpoint.route_table_ids
            if routes is not None and not Token.is_unresolved(routes) and not tables <= set(routes):
                continue
        elif stack.resolve(endpoint.private_dns_enabled) is not True:
            continue
        reachable.append(service)
    return [name for name in needed if not any(f'.{name}"' in service for service in reachable)]


def require_endpoints(construct: str, vpc: ec2.IVpc, vpc_subnets: Optional[ec2.SubnetSelection], *, uses: str,
                      fix: str, scope: Optional[Construct] = None) -> None:
    """Fails synth when the selected subnets of a VPC of this app are isolated and lack one of the construct's
    ``ENDPOINTS_WITHOUT_EGRESS``: without it a call times out on the instance, with no error at deploy. ``uses`` says
    what goes through them, ``fix`` how to add them. An imported VPC's endpoints cannot be seen: with ``scope``, its
    isolated subnets get a warning listing what the construct needs there."""
    needed = list(ENDPOINTS_WITHOUT_EGRESS[construct])
    if scope is not None and not isinstance(vpc, ec2.Vpc):
        isolated = {s.subnet_id for s in vpc.isolated_subnets}
        if any(s.subnet_id in isolated for s in selected_subnets(vpc, vpc_subnets)):
            Annotations.of(scope).add_warning_v2(UNCHECKED_ENDPOINTS_WARNING, (
                f"{construct}: its subnets are isolated subnets of an imported VPC, whose endpoints the app cannot "
                f"see: it needs VPC endpoints for {', '.join(needed)} there, or its jobs wait and its alarms get no "
                "data, with no error at deploy."))
    missing = missing_interface_endpoints(vpc, vpc_subnets, needed)
    if missing:
        raise ValidationError(construct, "vpc", vpc.node.path,
                              f"isolated subnets with VPC endpoints for {needed} (no NAT gateway: {uses}; an "
                              "interface endpoint with private DNS, a gateway endpoint routed from these subnets); "
                              f"missing: {missing}", fix)


def warn_without_session_manager(scope: Construct, construct: str, vpc: ec2.IVpc,
                                 vpc_subnets: Optional[ec2.SubnetSelection]) -> None:
    """A warning when isolated subnets of a VPC of this app lack Session Manager's endpoints: the instances run, but
    nobody can get a shell on them."""
    missing = missing_interface_endpoints(vpc, vpc_subnets, SESSION_MANAGER_ENDPOINTS)
    if missing:
        Annotations.of(scope).add_warning_v2(NO_SESSION_MANAGER_WARNING, (
            f"{construct}: its isolated subnets have no VPC endpoint for {missing}: the instances work, but Session "
            "Manager, their only way in, cannot reach them. Add them (PlatformNetwork's DEFAULT_INTERFACE_ENDPOINTS "
            "has them) if you need a shell."))


def _why_public(subnet: ec2.ISubnet, public_ids: set[str], internet_gateways: set[str]) -> Optional[str]:
    if subnet.subnet_id in public_ids:
        return "a public subnet of the VPC (routed to its internet gateway)"
    resource = subnet.node.default_child
    if isinstance(resource, ec2.CfnSubnet) and resource.map_public_ip_on_launch is True:
        return "maps public IPv4 addresses on launch"
    for child in subnet.node.children:
        if isinstance(child, ec2.CfnRoute) and child.gateway_id is not None and child.gateway_id in internet_gateways:
            return "routes to an internet gateway"
    return None


def require_private_subnets(scope: Construct, construct: str, vpc: ec2.IVpc,
                            vpc_subnets: Optional[ec2.SubnetSelection], allow_public_subnets: bool) -> None:
    """Refuses selected subnets whose instances would get public addresses: public subnets (imported ones included,
    as the VPC lists them), and subnets of this app that map public IPs on launch or route to an internet gateway.
    ``allow_public_subnets`` turns the refusal into a warning. Imported subnets are checked only by the VPC's list."""
    public_ids = {subnet.subnet_id for subnet in vpc.public_subnets}
    internet_gateways = {gateway.ref for gateway in Stack.of(vpc).node.find_all()
                         if isinstance(gateway, ec2.CfnInternetGateway)}
    found = [(subnet, why) for subnet in selected_subnets(vpc, vpc_subnets)
             if (why := _why_public(subnet, public_ids, internet_gateways))]
    if not found:
        return
    names = [subnet.node.path if Token.is_unresolved(subnet.subnet_id) else subnet.subnet_id
             for subnet, _ in found]
    reasons = "; ".join(f"{name}: {why}" for name, (_, why) in zip(names, found))
    if allow_public_subnets:
        Annotations.of(scope).add_warning_v2(PUBLIC_SUBNETS_WARNING, (
            f"{construct}: allow_public_subnets=True: its instances may get public addresses in {reasons}. Without "
            "inbound rules they accept no connection, but private subnets keep them off the internet."))
        return
    raise ValidationError(
        construct, "vpc_subnets", names,
        f"private subnets: {reasons}, so the instances would get public addresses, and the platform keeps compute "
        "private",
        "select private subnets (e.g. PlatformNetwork.compute_subnets, or ec2.SubnetSelection(subnet_type="
        "ec2.SubnetType.PRIVATE_WITH_EGRESS or PRIVATE_ISOLATED)), or pass allow_public_subnets=True to accept "
        "public addresses (a warning)")


@refusal_leaves_no_node
class PlatformNetwork(Construct):
    """A VPC for GPU training: private subnets in every given AZ, private access to S3 and AWS APIs, flow logs.

    - Compute subnets are private: isolated when ``nat_gateways`` is 0, routed through NAT gateways otherwise
      (then with public subnets for the gateways). Instances never get public addresses.
    - An S3 gateway endpoint (free) so dataset reads and checkpoint writes stay off NAT, and interface endpoints
      (each about USD 7.30 per AZ per month) for what instances must reach privately.
    - VPC flow logs to a CloudWatch Logs group encrypted with ``flow_logs_key``.
    - The default security group is left as EC2 creates it: restricting it needs a Lambda-backed custom resource.

    Availability Zones are given, never looked up. CDK's ``ec2.Vpc`` reads its stack's AZs even when given
    them, which in a stack bound to an account and Region is a context lookup (it needs credentials at synth).
    So in such a stack the construct requires the stack's AZs to be known without a lookup, and fails at synth
    with the fix otherwise: either the stack overrides ``availability_zones`` (CDK's documented way), or the
    ``availability-zones:account=<account>:region=<region>`` context is pinned above the stack
    (``App(context=availability_zone_context(...))``, a function of this module; the platform's stages pin it).

    :param availability_zones: AZ names in the stack's Region, e.g. ``['us-east-1a', 'us-east-1b']``.
    :param flow_logs_key: KMS key for the flow-log group. A key of this app gets the CloudWatch Logs statement
        (once per key, as ``PlatformKey`` has it); an imported key fails at synth unless ``key_policy_has`` declares it.
    :param cidr: IPv4 block, /16 to /24. Default: ``10.0.0.0/16``.
    :param nat_gateways: 0 (default, cheapest: no internet from the subnets) up to one per AZ.
    :param interface_endpoints: Default: ``DEFAULT_INTERFACE_ENDPOINTS`` (SSM, SSM messages, EC2 messages,
        CloudWatch metrics, CloudWatch Logs, EC2, Auto Scaling).
    :param flow_logs_traffic: Default: REJECT (denied traffic only, the cheap security baseline); ALL for full audit.
    :param flow_logs_retention: Default: one year.
    :param removal_policy: for the flow-log group. Default: RETAIN.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        availability_zones: Sequence[str],
        flow_logs_key: kms.IKey,
        cidr: str = "10.0.0.0/16",
        nat_gateways: int = 0,
        interface_endpoints: Sequence[ec2.InterfaceVpcEndpointAwsService] = DEFAULT_INTERFACE_ENDPOINTS,
        flow_logs_traffic: ec2.FlowLogTrafficType = ec2.FlowLogTrafficType.REJECT,
        flow_logs_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, id)
        _validate_azs("PlatformNetwork", availability_zones, Stack.of(self).region)
        try:
            network = ipaddress.IPv4Network(cidr)
        except ValueError:
            network = None
        if network is None or not 16 <= network.prefixlen <= 24:
            raise ValidationError("PlatformNetwork", "cidr", cidr, "an IPv4 CIDR block from /16 to /24",
                                  "use for example '10.0.0.0/16'")
        if not 0 <= nat_gateways <= len(availability_zones):
            raise ValidationError("PlatformNetwork", "nat_gateways", nat_gateways,
                                  f"0 to {len(availability_zones)} (one per AZ at most)", "set 0 (no internet) or 1 per AZ")
        names = [endpoint.short_name for endpoint in interface_endpoints]
        if len(set(names)) != len(names):
            raise ValidationError("PlatformNetwork", "interface_endpoints", names, "each service once", "remove the duplicate")
        _require_no_az_lookup(Stack.of(self), availability_zones)
        allow_log_groups(flow_logs_key, construct="PlatformNetwork", prop="flow_logs_key")

        compute_type = ec2.SubnetType.PRIVATE_WITH_EGRESS if nat_gateways else ec2.SubnetType.PRIVATE_ISOLATED
        subnets = [ec2.SubnetConfiguration(name="compute", subnet_type=compute_type)]
        if nat_gateways:
            subnets.insert(0, ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=26,
                                                      map_public_ip_on_launch=False))
        self.compute_subnets = ec2.SubnetSelection(subnet_type=compute_type)
        self.vpc = ec2.Vpc(
            self, "Resource",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones),
            nat_gateways=nat_gateways,
            subnet_configuration=subnets,
            restrict_default_security_group=False,
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3,
                                                                   subnets=[self.compute_subnets])},
        )
        for endpoint in interface_endpoints:
            interface = self.vpc.add_interface_endpoint(
                f"{endpoint.short_name.title().replace('.', '')}Endpoint",
                service=endpoint, subnets=self.compute_subnets, private_dns_enabled=True,
            )
            Validations.of(interface).acknowledge(Acknowledgment(
                id="AwsSolutions-EC23",
                reason="The endpoint's security group admits only HTTPS from the VPC's own CIDR block; the rule "
                       "cannot evaluate that intrinsic (Fn::GetAtt CidrBlock) and reports an error instead.",
            ))
        self.flow_logs_group = logs.LogGroup(
            self, "FlowLogs", encryption_key=flow_logs_key, retention=flow_logs_retention, removal_policy=removal_policy,
        )
        self.vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_logs_group),
                              traffic_type=flow_logs_traffic)


    @staticmethod
    def availability_zone_context(*, account: str, region: str, availability_zones: Sequence[str]) -> dict:
        """``ml_platform_constructs.availability_zone_context``: the context that pins a Region's AZs."""
        return availability_zone_context(account=account, region=region, availability_zones=availability_zones)


@refusal_leaves_no_node
class ImportedNetwork(Construct):
    """A VPC another team owns, referenced from ids without a lookup; nothing is created in it.

    The VPC's owner provides the subnets where GPU instances run (one per AZ, in the same order as
    ``availability_zones``): private subnets (with a NAT gateway), or isolated ones (no route to the internet), and
    the VPC endpoints the constructs placed there call (``ENDPOINTS_WITHOUT_EGRESS``, per construct; at least the
    S3 gateway endpoint and ``DEFAULT_INTERFACE_ENDPOINTS``). The app cannot see an imported VPC's endpoints, so
    nothing checks them at synth: with isolated subnets a warning lists them.

    :param vpc_id: e.g. ``vpc-0123456789abcdef0``.
    :param availability_zones: the AZs of the subnets, in order.
    :param private_subnet_ids: one private subnet per AZ, where GPU instances run. Default: none (then
        ``isolated_subnet_ids``).
    :param isolated_subnet_ids: one isolated subnet per AZ, for a VPC without NAT gateways. Default: none. Exactly
        one of the two is given.
    """

    def __init__(self, scope: Construct, id: str, *, vpc_id: str, availability_zones: Sequence[str],
                 private_subnet_ids: Sequence[str] = (), isolated_subnet_ids: Sequence[str] = ()) -> None:
        _validate_azs("ImportedNetwork", availability_zones, Stack.of(scope).region)
        if not Token.is_unresolved(vpc_id) and not re.match(r"^vpc-[0-9a-f]{8,17}$", vpc_id):
            raise ValidationError("ImportedNetwork", "vpc_id", vpc_id, "a VPC id such as vpc-0123456789abcdef0",
                                  "copy the id from the VPC console or `aws ec2 describe-vpcs`")
        if bool(private_subnet_ids) == bool(isolated_subnet_ids):
            raise ValidationError("ImportedNetwork", "private_subnet_ids / isolated_subnet_ids",
                                  [list(private_subnet_ids), list(isolated_subnet_ids)], "exactly one of the two",
                                  "pass private_subnet_ids for subnets with a NAT gateway, isolated_subnet_ids for "
                                  "subnets without one")
        prop, subnet_ids = (("private_subnet_ids", private_subnet_ids) if private_subnet_ids
                            else ("isolated_subnet_ids", isolated_subnet_ids))
        for subnet_id in subnet_ids:
            if not Token.is_unresolved(subnet_id) and not re.match(r"^subnet-[0-9a-f]{8,17}$", subnet_id):
                raise ValidationError("ImportedNetwork", prop, subnet_id,
                                      "a subnet id such as subnet-0123456789abcdef0", "copy the ids of the subnets")
        if len(subnet_ids) != len(availability_zones):
            raise ValidationError("ImportedNetwork", prop, list(subnet_ids),
                                  f"one subnet per AZ ({len(availability_zones)})",
                                  "list exactly one subnet for each of availability_zones, in the same order")
        super().__init__(scope, id)
        self.vpc: ec2.IVpc = ec2.Vpc.from_vpc_attributes(
            self, "Resource", vpc_id=vpc_id, availability_zones=list(availability_zones),
            **{prop: list(subnet_ids)})
        self.compute_subnets = ec2.SubnetSelection(
            subnets=self.vpc.private_subnets if private_subnet_ids else self.vpc.isolated_subnets)
        if isolated_subnet_ids:
            listed = "; ".join(f"{name}: {', '.join(names)}" for name, names in ENDPOINTS_WITHOUT_EGRESS.items())
            Annotations.of(self).add_warning_v2(UNCHECKED_ENDPOINTS_WARNING, (
                "ImportedNetwork: isolated subnets: the app cannot see this VPC's endpoints, so nothing checks them "
                f"at synth. Each construct placed here needs its own ({listed}); without one, jobs wait or alarms "
                "never get data, with no error at deploy."))
        Annotations.of(self).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId",
            "The platform adds no routes or gateway endpoints to an imported VPC, so it never reads its route tables.")
