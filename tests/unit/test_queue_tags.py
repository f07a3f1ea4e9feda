"""A tag change must never replace a TrainingQueue's compute environments or placement group: their top-level Tags
are create-only (CloudFormation replaces the resource, and Batch terminates the instances under running jobs; the
update policy does not apply to a replacement). The create-only properties come from the resource schemas cfn-lint
bundles, the same CloudFormation uses."""

import dataclasses
import json
from functools import lru_cache
from pathlib import Path

import cfnlint
import pytest
from aws_cdk import Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from ml_platform_constructs.runtime.handlers.budget_guard import BUDGET_SCOPE_TAG, QUEUE_TAG
from stacks.stage import PlatformStage
from tests.conftest import ACCOUNT, new_app, training_queue

SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"
GUARDED = ("AWS::Batch::ComputeEnvironment", "AWS::EC2::PlacementGroup")


@lru_cache
def create_only(resource_type: str) -> list[str]:
    """The resource's create-only property paths (JSON pointers under /properties), from its registry schema."""
    schema_id = json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text())[resource_type]
    schema = json.loads((SCHEMAS / "resources" / f"{schema_id}.json").read_text())
    return schema["createOnlyProperties"]


def test_the_schema_says_what_this_file_guards():
    # Confirmed before the fix: both resources' Tags are create-only; the instances' tags are not.
    assert "/properties/Tags" in create_only("AWS::Batch::ComputeEnvironment")
    assert "/properties/ComputeResources/Tags" not in create_only("AWS::Batch::ComputeEnvironment")
    assert "/properties/Tags" in create_only("AWS::EC2::PlacementGroup")


def _at(properties: dict, pointer: str):
    value = {"properties": properties}
    for part in pointer.strip("/").split("/"):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def create_only_values(template: Template) -> dict:
    return {(resource_type, logical_id): {p: _at(r.get("Properties", {}), p) for p in create_only(resource_type)}
            for resource_type in GUARDED for logical_id, r in template.find_resources(resource_type).items()}


def team_app_template(tmp_path_factory, cost_center: str, flags: dict) -> Template:
    """A team's own app: an app-wide tag and a queue with a multi-node environment (placement group)."""
    app = new_app(tmp_path_factory.mktemp("team"), **{
        f"availability-zones:account={ACCOUNT}:region=us-east-1": ["us-east-1a", "us-east-1b"], **flags})
    Tags.of(app).add("cost-center", cost_center)
    stack = Stack(app, "Team", env={"account": ACCOUNT, "region": "us-east-1"})
    Tags.of(stack).add("owner", f"team-{cost_center}")
    training_queue(stack, on_demand_max_vcpus=8, budget_scope="research", multi_node_max_vcpus=64,
                   multi_node_instance_types=[ec2.InstanceType("g5.8xlarge"), ec2.InstanceType("g6.8xlarge")])
    return Template.from_stack(stack)


# A team's app may lack this project's feature flags: its tag aspects then run at the default aspect priority, and
# aspect stabilization changes the order aspects run in.
FLAGS = {"project's cdk.json": {},
         "no aspect flags": {"@aws-cdk/core:aspectPrioritiesMutating": False, "@aws-cdk/core:aspectStabilization": False},
         "aspect stabilization": {"@aws-cdk/core:aspectPrioritiesMutating": False,
                                  "@aws-cdk/core:aspectStabilization": True}}


@pytest.fixture(scope="module", params=list(FLAGS))
def team_apps(tmp_path_factory, request):
    return tuple(team_app_template(tmp_path_factory, cost_center, FLAGS[request.param])
                 for cost_center in ("ml-research", "ml-vision"))


def test_a_team_apps_tag_change_replaces_no_compute_environment_or_placement_group(team_apps):
    before, after = team_apps
    values = create_only_values(before)
    assert sorted(t for t, _ in values) == ["AWS::Batch::ComputeEnvironment"] * 3 + ["AWS::EC2::PlacementGroup"]
    assert create_only_values(after) == values


def job_queue_tags(template: Template) -> dict:
    return {k: r["Properties"]["Tags"] for k, r in template.find_resources("AWS::Batch::JobQueue").items()}


def test_a_team_apps_tag_change_leaves_the_job_queues_tags_alone(team_apps):
    # The schema lets them change in place; the CloudFormation reference says a change replaces the queue.
    before, after = team_apps
    assert len(job_queue_tags(before)) == 2
    assert job_queue_tags(after) == job_queue_tags(before)
    assert all(set(tags) == {QUEUE_TAG, BUDGET_SCOPE_TAG} for tags in job_queue_tags(after).values())


def test_the_compute_environments_keep_the_tags_the_budget_guard_needs(team_apps):
    _, after = team_apps
    for resource in after.find_resources("AWS::Batch::ComputeEnvironment").values():
        # The guard's UpdateComputeEnvironment is allowed only on this tag (aws:ResourceTag condition).
        assert resource["Properties"]["Tags"] == {QUEUE_TAG: "Queue", BUDGET_SCOPE_TAG: "research"}
    for resource in after.find_resources("AWS::EC2::PlacementGroup").values():
        assert resource["Properties"]["Tags"] == [{"Key": QUEUE_TAG, "Value": "Queue"}]


def test_the_instances_still_carry_the_apps_cost_tags(team_apps):
    # ComputeResources.Tags is updatable (an infrastructure update that lets running jobs finish): cost reports by
    # tag keep working, and a tag change reaches new instances without ending a job.
    _, after = team_apps
    for resource in after.find_resources("AWS::Batch::ComputeEnvironment").values():
        assert resource["Properties"]["ComputeResources"]["Tags"] == {
            "cost-center": "ml-vision", "owner": "team-ml-vision", QUEUE_TAG: "Queue", BUDGET_SCOPE_TAG: "research"}


def stage_compute(tmp_path_factory, config, cost_center: str) -> Template:
    """The platform's own staging Compute stack (it has a multi-node environment) with another cost center and
    another app-wide tag."""
    env = dataclasses.replace(config.environments["staging"], cost_center=cost_center)
    app = new_app(tmp_path_factory.mktemp("stage"))
    Tags.of(app).add("team", cost_center)
    stage = PlatformStage(app, "staging", config=env)
    return Template.from_stack(stage.compute)


def test_editing_the_stages_cost_center_replaces_no_compute_environment_or_placement_group(tmp_path_factory, config):
    before = stage_compute(tmp_path_factory, config, "ml-research")
    after = stage_compute(tmp_path_factory, config, "ml-vision")
    values = create_only_values(before)
    assert any(t == "AWS::EC2::PlacementGroup" for t, _ in values)
    assert create_only_values(after) == values
    assert job_queue_tags(after) == job_queue_tags(before)
    for resource in after.find_resources("AWS::Batch::ComputeEnvironment").values():
        assert resource["Properties"]["Tags"][BUDGET_SCOPE_TAG] == "staging"
        assert resource["Properties"]["ComputeResources"]["Tags"]["cost-center"] == "ml-vision"
