"""The budget guard's permissions asked as AWS would ask them (iam_policy.py evaluates the synthesized policy): what
it may stop, start or end is bound to its own budget scope, and it may do all the work a stop and a resume need.

"Can change compute" is derived from the actions, not from a list of statements: every action of a service that
runs paid compute that is not a read (Describe, List, Get, View, Search). So a new statement that can stop
something without the scope condition fails here, whatever its Sid.
"""

import pytest
from aws_cdk import aws_kms as kms

from iam_policy import (ACCOUNT, REGION, Request, UnsupportedPolicy, actions, allowed, concrete, function_role,
                        resources, role_statements)
from ml_platform_constructs import AlertTopic, BudgetGuard
from ml_platform_constructs.runtime.handlers.budget_guard import BUDGET_SCOPE_TAG, FLEET_TAG, QUEUE_TAG

COMPUTE_SERVICES = {"autoscaling", "batch", "ec2", "ecs", "eks", "sagemaker"}
READS = ("Describe", "List", "Get", "View", "Search")
# The only statement that may change compute without the scope condition, and why.
UNSCOPED = {("EndAndMarkQueueJobs", "batch:TerminateJob"), ("EndAndMarkQueueJobs", "batch:TagResource")}
# A Batch job carries only the tags its submitter gave (Batch copies no queue or definition tags onto the job, and
# propagateTags reaches the ECS task only), so no condition can name the scope of a job: the function ends and marks
# only jobs it listed in a governed job queue.
ARN = f"arn:aws:{{}}:{REGION}:{ACCOUNT}:{{}}"
FLEET = ARN.format("autoscaling", "autoScalingGroup:6d3f:autoScalingGroupName/dev-training")
INSTANCE = ARN.format("ec2", "instance/i-0abc")
QUEUE = ARN.format("batch", "job-queue/dev-training")
ENVIRONMENT = ARN.format("batch", "compute-environment/dev-training-spot")
DEFINITION = ARN.format("batch", "job-definition/dev-train:3")
JOB = ARN.format("batch", "job/5b1c")
SCOPE = "team-a"


def changes_compute(action: str) -> bool:
    service, _, name = action.partition(":")
    return service.lower() in COMPUTE_SERVICES and not name.startswith(READS)


@pytest.fixture(scope="module")
def guard(synth_stack):
    """The guard's statements and scope, in a stack of its own (scope other than the default)."""
    def body(stack):
        key = kms.Key(stack, "Key")
        BudgetGuard(stack, "Guard", monthly_limit=1500, alerts=AlertTopic(stack, "Alerts", master_key=key).topic,
                    key=key, environment="dev", budget_scope=SCOPE)
    template = synth_stack(body).to_json()
    function = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"
                    and "BUDGET_SCOPE" in r["Properties"].get("Environment", {}).get("Variables", {}))
    return role_statements(template, function_role(template, function)), SCOPE


def unscoped_changes(statements, scope):
    """(Sid, action, resource) of every compute change the policy allows on a resource of another scope."""
    found = []
    for statement in statements:
        if statement["Effect"] != "Allow":
            continue
        for action in filter(changes_compute, actions(statement)):
            for pattern in resources(statement):
                tags = {FLEET_TAG: "training", QUEUE_TAG: "training"}
                request = Request(action.replace("*", "Anything"), concrete(pattern), {**tags, BUDGET_SCOPE_TAG: scope})
                assert allowed(statements, request), (action, pattern)  # the statement works for its own scope
                other = Request(request.action, request.resource, {**tags, BUDGET_SCOPE_TAG: f"{scope}-other"})
                if allowed(statements, other) and (statement.get("Sid"), action) not in UNSCOPED:
                    found.append((statement.get("Sid"), action, pattern))
    return found


def test_every_statement_that_can_change_compute_is_bound_to_the_guards_scope(guard):
    statements, scope = guard
    assert unscoped_changes(statements, scope) == []


def test_the_check_finds_a_stopping_statement_without_the_condition(guard):
    statements, scope = guard
    added = {"Effect": "Allow", "Action": ["ec2:StopInstances", "ec2:DescribeInstances"],
             "Resource": f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/*"}
    assert unscoped_changes([*statements, added], scope) == [(None, "ec2:StopInstances", added["Resource"])]
    anywhere = {"Effect": "Allow", "Action": "autoscaling:*", "Resource": "*"}
    assert (None, "autoscaling:*", "*") in unscoped_changes([*statements, anywhere], scope)


def request(action, resource, **tags):
    return Request(action, resource, {{"scope": BUDGET_SCOPE_TAG, "fleet": FLEET_TAG, "queue": QUEUE_TAG}[k]: v
                                      for k, v in tags.items()})


@pytest.mark.parametrize("action, resource, tags", [
    ("autoscaling:SuspendProcesses", FLEET, {"scope": SCOPE, "fleet": "training"}),
    ("autoscaling:UpdateAutoScalingGroup", FLEET, {"scope": SCOPE, "fleet": "training"}),
    ("autoscaling:ResumeProcesses", FLEET, {"scope": SCOPE, "fleet": "training"}),
    ("autoscaling:CreateOrUpdateTags", FLEET, {"scope": SCOPE, "fleet": "training"}),
    ("batch:UpdateJobQueue", QUEUE, {"scope": SCOPE, "queue": "training"}),
    ("batch:UpdateComputeEnvironment", ENVIRONMENT, {"scope": SCOPE, "queue": "training"}),
    ("batch:TagResource", QUEUE, {"scope": SCOPE, "queue": "training"}),
    ("batch:SubmitJob", QUEUE, {"scope": SCOPE, "queue": "training"}),
    ("batch:SubmitJob", DEFINITION, {"scope": SCOPE}),
    ("batch:TerminateJob", JOB, {}),
    ("ec2:TerminateInstances", INSTANCE, {"scope": SCOPE, "queue": "training"}),
    ("batch:UntagResource", QUEUE, {"scope": SCOPE, "queue": "training"}),  # resume lifts the stop tag
    # what it reads to find and price what runs (no resource-level permissions: any resource)
    *[(action, "*", {}) for action in (
        "autoscaling:DescribeAutoScalingGroups", "ec2:DescribeInstances", "sagemaker:ListEndpoints", "sagemaker:ListTags",
        "batch:DescribeJobQueues", "batch:ListJobs", "batch:DescribeJobs", "batch:DescribeComputeEnvironments",
        "batch:DescribeJobDefinitions")],
    ("ssm:PutParameter", ARN.format("ssm", "parameter/ml-platform/pending-jobs/dev-training/resnet"), {}),
    ("ssm:GetParametersByPath", ARN.format("ssm", "parameter/ml-platform/pending-jobs/dev-training"), {}),
    ("ssm:DeleteParameter", ARN.format("ssm", "parameter/ml-platform/pending-jobs/dev-training/resnet"), {}),
])
def test_the_guard_may_do_what_a_stop_and_a_resume_need(guard, action, resource, tags):
    statements, _ = guard
    assert allowed(statements, request(action, resource, **tags))


@pytest.mark.parametrize("action, resource, tags", [
    # another scope's fleet, queue, compute environment, definition, instance
    ("autoscaling:SuspendProcesses", FLEET, {"scope": "prod", "fleet": "training"}),
    ("batch:UpdateJobQueue", QUEUE, {"scope": "prod", "queue": "training"}),
    ("batch:UpdateComputeEnvironment", ENVIRONMENT, {"scope": "prod"}),
    ("batch:SubmitJob", DEFINITION, {"scope": "prod"}),
    ("ec2:TerminateInstances", INSTANCE, {"scope": "prod", "queue": "training"}),
    # the scope's own resources that are not the guard's to change
    ("autoscaling:SuspendProcesses", FLEET, {"scope": SCOPE}),  # a group that is no fleet
    ("ec2:TerminateInstances", INSTANCE, {"scope": SCOPE, "fleet": "training"}),  # a fleet's instance: scaled, not ended
    ("ec2:TerminateInstances", INSTANCE, {}),
    ("batch:SubmitJob", QUEUE, {}),
    # another account or Region
    ("batch:TerminateJob", JOB.replace(ACCOUNT, "210987654321"), {}),
    ("ec2:TerminateInstances", INSTANCE.replace(REGION, "eu-west-1"), {"scope": SCOPE, "queue": "training"}),
    # what a stop never needs
    ("ec2:StopInstances", INSTANCE, {"scope": SCOPE, "queue": "training"}),
    ("autoscaling:DeleteAutoScalingGroup", FLEET, {"scope": SCOPE, "fleet": "training"}),
    ("batch:DeleteJobQueue", QUEUE, {"scope": SCOPE, "queue": "training"}),
    ("sagemaker:DeleteEndpoint", ARN.format("sagemaker", "endpoint/dev-classifier"), {"scope": SCOPE}),
    ("ssm:PutParameter", ARN.format("ssm", "parameter/ml-platform/dev/datasets/latest"), {}),  # another path
])
def test_the_guard_may_not_touch_what_it_does_not_govern(guard, action, resource, tags):
    statements, _ = guard
    assert not allowed(statements, request(action, resource, **tags))


def test_the_guard_reads_its_budget_and_writes_metrics_only_to_its_namespace(guard):
    statements, _ = guard
    assert any(allowed(statements, Request("budgets:ViewBudget", r)) for s in statements
               if s["Action"] == "budgets:ViewBudget" for r in resources(s))
    metric = Request("cloudwatch:PutMetricData", context={"cloudwatch:namespace": "MLPlatform/Cost"})
    assert allowed(statements, metric)
    assert not allowed(statements, Request("cloudwatch:PutMetricData", context={"cloudwatch:namespace": "AWS/EC2"}))


def test_each_environments_guard_is_bound_to_its_own_scope(templates, config):
    """The same rule on the app's guards, with the scope each environment gives its guard."""
    checked = 0
    for name, template in templates.items():
        body = template.to_json()
        for logical_id, resource in body["Resources"].items():
            variables = resource["Properties"].get("Environment", {}).get("Variables", {}) \
                if resource["Type"] == "AWS::Lambda::Function" else {}
            if "BUDGET_SCOPE" in variables:
                statements = role_statements(body, function_role(body, logical_id))
                assert unscoped_changes(statements, variables["BUDGET_SCOPE"]) == [], name
                checked += 1
    assert checked == sum(1 for env in config.environments.values() if env.budget)


def test_the_evaluator_refuses_what_it_does_not_model():
    with pytest.raises(UnsupportedPolicy):
        allowed([{"Effect": "Allow", "Action": "ec2:*", "Resource": "*",
                  "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}}}], Request("ec2:RunInstances"))
    with pytest.raises(UnsupportedPolicy):
        allowed([{"Effect": "Allow", "Action": "ec2:*", "Resource": "*",
                  "Condition": {"NumericLessThan": {"aws:MultiFactorAuthAge": "3600"}}}], Request("ec2:RunInstances"))


def test_the_evaluator_follows_iam_on_deny_null_and_missing_keys():
    allow = {"Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "*",
             "Condition": {"StringEquals": {"aws:ResourceTag/team": "a"}, "Null": {"aws:ResourceTag/queue": "false"}}}
    assert allowed([allow], Request("ec2:terminateinstances", "i", {"team": "a", "queue": "q"}))  # actions ignore case
    assert not allowed([allow], Request("ec2:TerminateInstances", "i", {"team": "a"}))  # Null: the tag must exist
    assert not allowed([allow], Request("ec2:TerminateInstances", "i", {"queue": "q"}))  # a missing key fails
    deny = {"Effect": "Deny", "Action": "ec2:*", "Resource": "*"}
    assert not allowed([allow, deny], Request("ec2:TerminateInstances", "i", {"team": "a", "queue": "q"}))
    if_exists = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*",
                 "Condition": {"StringEqualsIfExists": {"aws:SourceAccount": ACCOUNT}}}
    assert allowed([if_exists], Request("s3:GetObject", "arn:aws:s3:::b/k"))
    assert not allowed([if_exists], Request("s3:GetObject", "arn:aws:s3:::c/k"))
    assert not allowed([if_exists], Request("s3:GetObject", "arn:aws:s3:::b/k", context={"aws:SourceAccount": "1"}))
