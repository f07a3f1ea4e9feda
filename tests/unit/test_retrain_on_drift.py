"""RetrainOnDrift: its job definition where it is used, the claims table, one rule per trigger, least privilege."""

import json
import shutil
import subprocess
import sys
from ml_platform_constructs import runtime

import pytest
from aws_cdk import Duration, Stack
from aws_cdk import aws_batch as batch
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template

from ml_platform_constructs import BudgetGuard, DatasetBucket, RetrainOnDrift, TrainingQueue, ValidationError
from ml_platform_constructs.serving.retrain_on_drift import FUNCTION_FILES
from tests.conftest import ACCOUNT, new_app, queue_vpc

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
RETRAIN_IMAGE = "111111111111.dkr.ecr.us-east-1.amazonaws.com/classifier-train:1.0"
ENV = {"account": ACCOUNT, "region": "us-east-1"}


def drift_alarm(stack, id="Drift"):
    return cloudwatch.Alarm(stack, id, metric=cloudwatch.Metric(namespace="MLPlatform/Drift", metric_name="MaxPSI"),
                            threshold=0.2, evaluation_periods=1)


def two_stacks(outdir, retrain_image=RETRAIN_IMAGE, **retrain):
    """A queue in one stack and the endpoint's retraining in another, as the platform app deploys them."""
    app = new_app(outdir, **{f"availability-zones:account={ACCOUNT}:region=us-east-1": ["us-east-1a", "us-east-1b"]})
    compute, serving = Stack(app, "Compute", env=ENV), Stack(app, "Serving", env=ENV)
    key = kms.Key(compute, "Key")
    queue = TrainingQueue(compute, "Queue", vpc=queue_vpc(compute), image_uri=IMAGE, key=key,
                          instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")],
                          alerts=sns.Topic(compute, "Alerts"), datasets=DatasetBucket(compute, "Data", encryption_key=key),
                          queue_name="training", budget_scope="dev")
    props = {"command": ["python", "train.py"], "job_name_prefix": "retrain-classifier", **retrain}
    construct = RetrainOnDrift(serving, "Retrain", alarm=drift_alarm(serving), queue=queue, image_uri=retrain_image,
                               alerts=sns.Topic(serving, "Alerts"), **props)
    return app, construct


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    app, construct = two_stacks(tmp_path_factory.mktemp("retrain"))
    construct.add_trigger("quality", drift_alarm(Stack.of(construct), "Quality"), cooldown=Duration.hours(6))
    assembly = app.synth()
    return {name: assembly.get_stack_by_name(name).template for name in ("Compute", "Serving")}


def imports_of(template) -> set[str]:
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if "Fn::ImportValue" in node:
                found.add(node["Fn::ImportValue"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(template)
    return found


def exports_of(template) -> dict[str, object]:
    return {o["Export"]["Name"]: o["Value"] for o in template.get("Outputs", {}).values() if "Export" in o}


def referenced(value) -> set[str]:
    """The logical ids an exported value reads (Ref, Fn::GetAtt)."""
    if isinstance(value, dict):
        if "Ref" in value:
            return {value["Ref"]}
        if "Fn::GetAtt" in value:
            return {value["Fn::GetAtt"][0]}
        return set().union(*map(referenced, value.values()))
    if isinstance(value, list):
        return set().union(*map(referenced, value))
    return set()


def test_a_new_retraining_image_changes_nothing_the_other_stack_imports(built, tmp_path):
    """CloudFormation refuses to change an export another stack imports, and a job definition's Ref (its revision
    ARN) changes with every change to it (Fn::ImportValue docs): what an imported export reads must not change."""
    app, _ = two_stacks(tmp_path, retrain_image=RETRAIN_IMAGE.replace(":1.0", ":1.1"))
    assembly = app.synth()
    second = {name: assembly.get_stack_by_name(name).template for name in ("Compute", "Serving")}
    imported = imports_of(built["Serving"])
    assert imported and imported == imports_of(second["Serving"])
    before, after = exports_of(built["Compute"]), exports_of(second["Compute"])
    for name in imported:
        assert before[name] == after[name]
        for logical_id in referenced(before[name]):
            assert built["Compute"]["Resources"][logical_id] == second["Compute"]["Resources"][logical_id], (
                f"{name} reads {logical_id}, which the new image changes: a new Ref the importing stack blocks")
    assert built["Compute"] == second["Compute"]  # the queue's stack does not change at all
    definitions = [r for r in second["Serving"]["Resources"].values() if r["Type"] == "AWS::Batch::JobDefinition"]
    assert [d["Properties"]["ContainerProperties"]["Image"] for d in definitions] == [RETRAIN_IMAGE.replace(":1.0", ":1.1")]


def test_the_job_definition_lives_with_the_retraining_with_the_queues_settings_and_tags(built):
    serving, compute = Template.from_json(built["Serving"]), Template.from_json(built["Compute"])
    compute.resource_count_is("AWS::Batch::JobDefinition", 2)  # the queue's own: training and evaluation
    (definition,) = serving.find_resources("AWS::Batch::JobDefinition").values()
    properties = definition["Properties"]
    assert properties["ContainerProperties"]["Command"] == ["python", "train.py"]
    assert properties["RetryStrategy"] == next(iter(compute.find_resources("AWS::Batch::JobDefinition").values()))[
        "Properties"]["RetryStrategy"]
    assert properties["Tags"] == {"ml-platform:queue": "training", "ml-platform:budget-scope": "dev"}


def test_the_function_submits_the_definition_by_name_with_each_triggers_cooldown(built):
    serving = Template.from_json(built["Serving"])
    (definition,) = serving.find_resources("AWS::Batch::JobDefinition")
    (function,) = serving.find_resources("AWS::Lambda::Function").values()
    variables = function["Properties"]["Environment"]["Variables"]
    assert json.dumps({"Ref": definition}) in json.dumps(variables["JOB_DEFINITION"]) and "Fn::Select" in json.dumps(
        variables["JOB_DEFINITION"])  # the name parsed from the Ref, in this stack
    assert json.loads(variables["TRIGGERS"]) == {"drift": 86400, "quality": 21600}
    assert variables["JOB_NAME_PREFIX"] == "retrain-classifier"
    assert variables["CLAIMS_TABLE"] == {"Ref": next(iter(serving.find_resources("AWS::DynamoDB::Table")))}


def test_each_trigger_has_its_own_rule_that_names_it(built):
    rules = Template.from_json(built["Serving"]).find_resources("AWS::Events::Rule")
    assert len(rules) == 2
    for name in ("drift", "quality"):
        rule = next(r["Properties"] for r in rules.values() if f'"trigger":"{name}"' in json.dumps(
            r["Properties"]["Targets"][0]["InputTransformer"]["InputTemplate"]).replace('\\"', '"').replace(" ", ""))
        assert rule["EventPattern"]["detail"]["state"] == {"value": ["ALARM"]}
        assert rule["EventPattern"]["account"] == [ACCOUNT]  # the alarm's own account
        assert rule["Targets"][0]["RetryPolicy"]["MaximumRetryAttempts"] == 2
        assert rule["Targets"][0]["InputTransformer"]["InputPathsMap"]["id"] == "$.id"  # kept through retries


def test_the_claims_table_is_on_demand_encrypted_with_the_queues_key_and_recoverable(built):
    (table,) = Template.from_json(built["Serving"]).find_resources("AWS::DynamoDB::Table").values()
    properties = table["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST" and properties["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"}]
    assert properties["SSESpecification"]["SSEType"] == "KMS" and "Fn::ImportValue" in json.dumps(
        properties["SSESpecification"]["KMSMasterKeyId"])
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # Each event's alert mark (runtime/handlers/retrain.py) expires; the claims have no such attribute.
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expires", "Enabled": True}
    assert table["DeletionPolicy"] == "Retain"


def statements(built):
    serving = Template.from_json(built["Serving"])
    policy = next(p for k, p in serving.find_resources("AWS::IAM::Policy").items() if k.startswith("RetrainServiceRole"))
    return {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_it_may_submit_only_its_definition_to_its_queue_and_keep_only_its_queues_records(built):
    granted = statements(built)
    submit = granted["SubmitTheRetrainingJob"]
    assert submit["Action"] == "batch:SubmitJob"
    queue, definitions = submit["Resource"]
    assert "Fn::ImportValue" in json.dumps(queue) and json.dumps(definitions).endswith(':*"]]}')
    assert granted["TagItWithItsTrigger"]["Condition"] == {
        "ForAllValues:StringLike": {"aws:TagKeys": ["ml-platform:retrain-*"]}}
    records = json.dumps(granted["KeepItPendingWhileTheQueueIsStopped"]["Resource"])
    # Its own records (retrain-<job name>) in its queue's path, and only whether one is there: no decrypting read.
    assert ":parameter/ml-platform/pending-jobs/" in records and records.endswith('/retrain-retrain-classifier-*"]]}')
    assert sorted(granted["KeepItPendingWhileTheQueueIsStopped"]["Action"]) == ["ssm:GetParameter", "ssm:PutParameter"]
    assert "ssm:GetParametersByPath" not in json.dumps(granted) and "ssm:GetParameters\"" not in json.dumps(granted)
    assert "dynamodb:Scan" not in json.dumps(granted)


def test_with_a_budget_guard_of_another_key_it_needs_no_key_but_the_queues(tmp_path):
    """A team app whose guard encrypts its pending records with a key of its own: the retraining function reads the
    queue's records without decryption (tests/unit/test_retrain.py runs that path against a Parameter Store that
    refuses a foreign key), so its KMS rights name the queue's key only."""
    app, construct = two_stacks(tmp_path)
    queue_stack = app.node.find_child("Compute")
    guard_key = kms.Key(queue_stack, "GuardKey")
    BudgetGuard(queue_stack, "Guard", monthly_limit=100, alerts=sns.Topic(queue_stack, "GuardAlerts"), key=guard_key,
                environment="dev", budget_scope="dev")
    assembly = app.synth()
    compute_template = Template.from_json(assembly.get_stack_by_name("Compute").template)
    guard_key_id, queue_key_id = (next(k for k in compute_template.find_resources("AWS::KMS::Key") if k.startswith(name))
                                  for name in ("GuardKey", "Key"))
    serving = Template.from_json(assembly.get_stack_by_name("Serving").template)
    policy = next(p for k, p in serving.find_resources("AWS::IAM::Policy").items() if k.startswith("RetrainServiceRole"))
    granted = policy["Properties"]["PolicyDocument"]["Statement"]
    kms_statements = [s for s in granted if any(a.startswith("kms:") for a in (
        s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))]
    assert kms_statements and all(queue_key_id in json.dumps(s["Resource"]) for s in kms_statements)
    assert guard_key_id not in json.dumps(granted)
    (pending,) = [s for s in granted if s.get("Sid") == "KeepItPendingWhileTheQueueIsStopped"]
    assert sorted(pending["Action"]) == ["ssm:GetParameter", "ssm:PutParameter"]


def test_its_failures_alarm_the_alert_topic(built):
    Template.from_json(built["Serving"]).has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "Errors", "Namespace": "AWS/Lambda", "AlarmActions": [{"Ref": Match.string_like_regexp("^Alerts")}]})


def test_the_functions_code_imports_as_lambda_packages_it(tmp_path):
    for name in FUNCTION_FILES:
        shutil.copy(runtime.source(name), tmp_path / name)
    subprocess.run([sys.executable, "-c", "import retrain; retrain.PendingJobs; retrain.handler"], cwd=tmp_path, check=True)


@pytest.mark.parametrize("change,message", [
    ({"job_name_prefix": "-x"}, "job_name_prefix='-x' is invalid"),
    ({"job_name_prefix": "x" * 101}, "1-100 letters"),
    ({"cooldown": Duration.minutes(30)}, "cooldown='30 minutes' is invalid: 1 hour to 30 days"),
    ({"cooldown": Duration.days(31)}, "cooldown='31 days' is invalid: 1 hour to 30 days"),
    ({"image_uri": "docker.io/library/python:3"}, "add_job_definition image_uri='docker.io/library/python:3' is invalid"),
])
def test_invalid_props(change, message, tmp_path):
    with pytest.raises(ValidationError, match="Fix: ") as error:
        if "image_uri" in change:
            two_stacks(tmp_path, retrain_image=change["image_uri"])
        else:
            two_stacks(tmp_path, **change)
    assert message in str(error.value)


@pytest.mark.parametrize("name,cooldown,message", [
    ("Quality", Duration.hours(6), "add_trigger name='Quality' is invalid"),
    ("drift", Duration.hours(6), "a name not used yet on this retraining"),
    ("quality", Duration.minutes(5), "add_trigger('quality') cooldown='5 minutes' is invalid"),
])
def test_invalid_triggers(name, cooldown, message, tmp_path):
    _, construct = two_stacks(tmp_path)
    with pytest.raises(ValidationError) as error:
        construct.add_trigger(name, drift_alarm(Stack.of(construct), "Other"), cooldown=cooldown)
    assert message in str(error.value)


# --- a queue it cannot build a job definition with or submit to (issue 28, item 13) -----------------------------

SHARED_QUEUE = "arn:aws:batch:us-east-1:222222222222:job-queue/training"


def retrain_props(serving):
    return {"alarm": drift_alarm(serving), "image_uri": RETRAIN_IMAGE, "job_name_prefix": "retrain-classifier",
            "alerts": sns.Topic(serving, "Alerts")}


def test_a_queue_by_reference_is_refused_before_anything_is_built(tmp_path):
    """An imported job queue (a shared training account's) has no job definition to build or key to share: refused
    with the route that works, and nothing half-built left in the tree (the same id is free for a retry)."""
    app = new_app(tmp_path)
    serving = Stack(app, "Serving", env=ENV)
    shared = batch.JobQueue.from_job_queue_arn(serving, "SharedQueue", SHARED_QUEUE)
    with pytest.raises(ValidationError) as error:
        RetrainOnDrift(serving, "Retrain", queue=shared, **retrain_props(serving))
    message = str(error.value)
    assert message.startswith(f"RetrainOnDrift: queue='{SHARED_QUEUE}' is invalid: a TrainingQueue")
    assert "Fix: pass a TrainingQueue of this app in this construct's account and Region. For a queue in another " \
           "account (a shared training account), build RetrainOnDrift in the app that deploys that queue" in message
    assert "targets.EventBus" in message and "'A queue in another account'" in message
    assert serving.node.try_find_child("Retrain") is None
    assert Template.from_stack(serving).find_resources("AWS::Lambda::Function") == {}


def test_a_training_queue_of_another_account_is_refused(tmp_path):
    app = new_app(tmp_path, **{"availability-zones:account=222222222222:region=us-east-1": ["us-east-1a", "us-east-1b"]})
    training = Stack(app, "SharedTraining", env={"account": "222222222222", "region": "us-east-1"})
    serving = Stack(app, "Serving", env=ENV)
    key = kms.Key(training, "Key")
    queue = TrainingQueue(training, "Queue", vpc=queue_vpc(training), image_uri=IMAGE, key=key,
                          instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge")],
                          alerts=sns.Topic(training, "Alerts"),
                          datasets=DatasetBucket(training, "Data", encryption_key=key), queue_name="training")
    with pytest.raises(ValidationError, match=r"queue='SharedTraining/Queue' is invalid: a queue in this construct's "
                                              r"account \(123456789012\), not 222222222222: .* Fix: pass a TrainingQueue"):
        RetrainOnDrift(serving, "Retrain", queue=queue, **retrain_props(serving))
    assert serving.node.try_find_child("Retrain") is None


def test_an_alarm_of_the_serving_account_retrains_only_on_that_accounts_events(tmp_path):
    """The retraining next to a shared queue, on the serving account's alarm (by ARN): its rule matches that alarm's
    name and account, so a same-named alarm of the training account (or of a third account forwarding to its bus)
    starts nothing."""
    app, construct = two_stacks(tmp_path)
    serving = Stack.of(construct)
    forwarded = cloudwatch.Alarm.from_alarm_arn(
        serving, "ServingDrift", "arn:aws:cloudwatch:us-east-1:444455556666:alarm:serving-classifier-drift")
    construct.add_trigger("serving-drift", forwarded, cooldown=Duration.hours(24))
    patterns = [r["Properties"]["EventPattern"] for r in Template.from_stack(serving).find_resources(
        "AWS::Events::Rule").values()]
    (pattern,) = [p for p in patterns if p["detail"]["alarmName"] == ["serving-classifier-drift"]]
    assert pattern["account"] == ["444455556666"]
