"""PlatformStage: one environment, so `cdk deploy 'dev/*'` and `cdk diff 'prod/*'` address it whole."""

from __future__ import annotations

from typing import Optional

import jsii
from aws_cdk import Annotations, Aspects, Environment, IAspect, IStackSynthesizer, Stage, Tags
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from .compute_stack import ComputeStack
from .config import EnvironmentConfig
from .core_stack import CoreStack
from .data_stack import DataStack
from .governance_stack import GovernanceStack
from .serving_stack import ServingStack

# moto 5.2 fails to create a tagged AWS::KMS::Key from a template (KeyError 'TagKey' in its tagging service),
# and a tagged AWS::SSM::Parameter (it reads the template's tag map as a list), so the emulator target leaves
# them untagged; the deploy report says so.
EMULATOR_UNTAGGED_TYPES = ("AWS::KMS::Key", "AWS::SSM::Parameter")
# The emulator cannot resolve AWS's public /aws/service/... SSM parameters, so fleets there get a fixed image id.
# It creates no AWS::Budgets::Budget and fails on a Ref to one, so the emulator's budget gets a fixed name.
EMULATOR_AMI = "ami-0123456789abcdef0"


@jsii.implements(IAspect)
class EmulatorBatchEnvironments:
    """moto 5.2 creates a Batch compute environment only with an explicit ServiceRole it knows and the type in
    capitals (AWS uses Batch's service-linked role when none is given), and has no Fn::GetAtt for it (its Ref is
    the same ARN in AWS). Local target only: a stand-in role and Ref."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, batch.CfnComputeEnvironment):
            stack = node.stack
            role = stack.node.try_find_child("EmulatorBatchServiceRole") or iam.Role(
                stack, "EmulatorBatchServiceRole", assumed_by=iam.ServicePrincipal("batch.amazonaws.com"))
            node.add_property_override("Type", "MANAGED")
            node.add_property_override("ServiceRole", role.role_arn)
        elif isinstance(node, batch.CfnJobQueue):
            order = node.stack.resolve(node.compute_environment_order)
            node.add_property_override("ComputeEnvironmentOrder", [
                {"ComputeEnvironment": {"Ref": entry["computeEnvironment"]["Fn::GetAtt"][0]}, "Order": entry["order"]}
                for entry in order])


class PlatformStage(Stage):
    """One environment's stacks: Core (key, alert topic, network), Data (dataset bucket), Compute (GPU fleets, training queues),
    Serving (monitored SageMaker endpoints) when it has endpoints, Governance (budget, GPU stop) when it has a budget.

    :param synthesizer: Default: the default synthesizer (bootstrapped environment, bootstrap-version rule).
    :param emulator: synthesize for the local emulator (see EMULATOR_UNTAGGED_TYPES, EMULATOR_AMI, the
        governance stack's fixed budget name, and no managed MLflow: moto has no SageMaker MLflow and fails on any
        reference to one; local runs go to a local store). Default: False.
    """

    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig,
                 synthesizer: Optional[IStackSynthesizer] = None, emulator: bool = False) -> None:
        super().__init__(scope, id, env=Environment(account=config.account, region=config.region))
        # The AZs come from config: pinning this context stops CDK from looking them up (which needs credentials).
        self.node.set_context(f"availability-zones:account={config.account}:region={config.region}",
                              list(config.availability_zones))
        common = {"config": config, "synthesizer": synthesizer,
                  "termination_protection": config.termination_protection}
        self.core = CoreStack(self, "Core", description=f"{config.project} {config.name}: KMS key, alert topic, network",
                              **common)
        self.data = DataStack(self, "Data", key=self.core.platform_key.key, vpc=self.core.network.vpc,
                              subnets=self.core.network.compute_subnets, tracking=not emulator,
                              description=f"{config.project} {config.name}: dataset bucket and snapshot workflow",
                              **common)
        self.compute = ComputeStack(
            self, "Compute", vpc=self.core.network.vpc, subnets=self.core.network.compute_subnets,
            alerts=self.core.alerts.topic, key=self.core.platform_key.key, datasets=self.data.datasets,
            snapshots=self.data.snapshots, tracking=self.data.tracking, machine_image=ec2.MachineImage.generic_linux({config.region: EMULATOR_AMI}) if emulator else None,
            description=f"{config.project} {config.name}: Spot GPU fleets and training queues", **common)

        components = [(self.core, "core"), (self.data, "data"), (self.compute, "compute")]
        self.serving = None
        if config.endpoints:
            self.serving = ServingStack(
                self, "Serving", vpc=self.core.network.vpc, subnets=self.core.network.compute_subnets,
                alerts=self.core.alerts.topic, key=self.core.platform_key.key, datasets=self.data.datasets,
                queues=self.compute.queues,
                description=f"{config.project} {config.name}: monitored SageMaker endpoints", **common)
            components.append((self.serving, "serving"))
        self.governance = None
        if config.budget:
            self.governance = GovernanceStack(
                self, "Governance", alerts=self.core.alerts.topic, key=self.core.platform_key.key, emulator=emulator,
                description=f"{config.project} {config.name}: budget and GPU spend guard", **common)
            components.append((self.governance, "governance"))

        if emulator:
            Aspects.of(self.compute).add(EmulatorBatchEnvironments())
        excluded = list(EMULATOR_UNTAGGED_TYPES) if emulator else None
        for scope_, tags in ((self, config.tags), *((stack, {"component": name}) for stack, name in components)):
            for key, value in tags.items():
                Tags.of(scope_).add(key, value, exclude_resource_types=excluded)
        if config.is_dev:
            # dev is meant to be torn down with its stacks: the warning is known and accepted there.
            for stack in (self.data, self.serving):
                if stack is not None:
                    Annotations.of(stack).acknowledge_warning(
                        "ml-platform:dataset-bucket-destroy", "dev stateful resources are destroyed with their stack by design")
