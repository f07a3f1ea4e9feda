"""MonitoredEndpoint: capture, drift check, alarms and scaling on one endpoint synthesized for the module."""

import json

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template

from endpoint_vpc import endpoint_vpc
from ml_platform_constructs import DatasetBucket, EndpointAutoScaling, MonitoredEndpoint, ValidationError

IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack):
        datasets = DatasetBucket(stack, "Datasets")
        parts["endpoint"] = MonitoredEndpoint(
            stack, "Classifier", endpoint_name="classifier-dev", image_uri=IMAGE, model_data_bucket=datasets.bucket,
            model_data_key="models/classifier/model.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"),
            baseline_bucket=datasets, vpc=endpoint_vpc(stack), volume_key=kms.Key(stack, "VolumeKey"),
            logs_key=kms.Key(stack, "LogsKey"), auto_scaling=EndpointAutoScaling(max_capacity=4, invocations_per_instance=200))
    return synth_stack(body), parts


def resource(template, resource_type):
    return next(iter(template.find_resources(resource_type).values()))["Properties"]


def test_main_child_is_the_endpoint_with_its_name(built):
    template, parts = built
    assert parts["endpoint"].node.default_child is parts["endpoint"].endpoint
    assert resource(template, "AWS::SageMaker::Endpoint")["EndpointName"] == "classifier-dev"


def test_endpoint_config_captures_all_requests_and_responses_encrypted(built):
    capture = resource(built[0], "AWS::SageMaker::EndpointConfig")["DataCaptureConfig"]
    assert capture["EnableCapture"] is True and capture["InitialSamplingPercentage"] == 100
    assert capture["CaptureOptions"] == [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}]
    assert capture["CaptureContentTypeHeader"] == {"CsvContentTypes": ["text/csv"], "JsonContentTypes": ["application/json"]}
    assert "Fn::GetAtt" in capture["KmsKeyId"]


def test_capture_goes_to_its_own_bucket_not_the_training_data(built):
    template, _ = built
    capture = resource(template, "AWS::SageMaker::EndpointConfig")["DataCaptureConfig"]
    bucket_ref = json.dumps(capture["DestinationS3Uri"])
    assert "ClassifierCaptureBucket" in bucket_ref and "Datasets" not in bucket_ref


def test_captured_requests_expire(built):
    template, _ = built
    bucket = next(v["Properties"] for k, v in template.find_resources("AWS::S3::Bucket").items()
                  if k.startswith("ClassifierCaptureBucket") and "AccessLogs" not in k)
    rules = {r["Id"]: r for r in bucket["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-captured-requests"] == {"Id": "expire-captured-requests", "Prefix": "capture/",
                                                 "ExpirationInDays": 30, "Status": "Enabled"}


def test_storage_volume_is_encrypted_with_the_given_key(built):
    assert "Fn::GetAtt" in resource(built[0], "AWS::SageMaker::EndpointConfig")["KmsKeyId"]


def test_model_runs_in_the_vpc_without_inbound_rules(built):
    model = resource(built[0], "AWS::SageMaker::Model")
    assert len(model["VpcConfig"]["Subnets"]) == 2 and model["PrimaryContainer"]["Image"] == IMAGE


def test_model_role_reads_only_its_artifact_and_pulls_only_its_repository(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("ClassifierModelRole"))
    text = json.dumps(policy["Properties"]["PolicyDocument"])
    assert "/models/classifier/model.tar.gz" in text
    assert "repository/sagemaker-xgboost" in text and "683313688378" in text
    assert "/capture/*" in text


def test_drift_check_runs_hourly_on_python_with_its_settings(built):
    template, _ = built
    function = resource(template, "AWS::Lambda::Function")
    assert (function["Runtime"], function["Handler"], function["Timeout"]) == ("python3.14", "drift_handler.handler", 300)
    variables = function["Environment"]["Variables"]
    assert variables["BASELINE_KEY"] == "drift/baselines/classifier-dev/baseline.json"
    assert (variables["CAPTURE_PREFIX"], variables["VARIANT_NAME"]) == ("capture/classifier-dev/", "AllTraffic")
    assert (variables["WINDOW_HOURS"], variables["MAX_RECORDS"]) == ("24", "10000")
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 hour)"})


def test_drift_check_reads_capture_and_baseline_and_writes_only_results(built):
    template, _ = built
    policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items() if k.startswith("ClassifierDriftCheck"))
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    puts = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert len(puts) == 1 and "drift/results/classifier-dev/*" in json.dumps(puts[0]["Resource"])
    put_metrics = next(s for s in statements if s["Action"] == "cloudwatch:PutMetricData")
    assert put_metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "MLPlatform/Drift"}}


def test_the_drift_alarm_watches_the_psi_lower_bound_and_a_window_too_small_says_so(built):
    template = built[0]
    # A window too small to judge publishes no PSILowerBound: the alarm keeps its state (ignore), where "not
    # breaching" would flap it to OK and make the next judged drift a new episode for RetrainOnDrift.
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "MLPlatform/Drift", "MetricName": "PSILowerBound", "Threshold": 0.25, "Statistic": "Maximum",
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "TreatMissingData": "ignore", "EvaluationPeriods": 1,
        "Dimensions": [{"Name": "EndpointName", "Value": "classifier-dev"}]})
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "MetricName": "DriftJudged", "Threshold": 1, "ComparisonOperator": "LessThanThreshold", "EvaluationPeriods": 24,
        "AlarmDescription": Match.string_like_regexp("drift not judged for 24 checks in a row")})
    metrics = {a["Properties"].get("MetricName") for a in template.find_resources("AWS::CloudWatch::Alarm").values()}
    assert "MaxKL" not in metrics and "MaxPSI" not in metrics  # KL is published, it alarms on nothing
    variables = next(f["Properties"]["Environment"]["Variables"] for f in
                     template.find_resources("AWS::Lambda::Function").values()
                     if f["Properties"]["Handler"] == "drift_handler.handler")
    assert {k: variables[k] for k in ("PSI_THRESHOLD", "SIGNIFICANCE", "SPREAD_RATIO_LOW", "SPREAD_RATIO_HIGH",
                                      "EXPLAINED_VARIANCE_CHANGE", "FALSE_ALARMS_PER_90_DAYS", "SCHEDULE_MINUTES")} == {
        "PSI_THRESHOLD": "0.25", "SIGNIFICANCE": repr(0.25 / 2160), "SPREAD_RATIO_LOW": "0.5",
        "SPREAD_RATIO_HIGH": "2.0", "EXPLAINED_VARIANCE_CHANGE": "5.0", "FALSE_ALARMS_PER_90_DAYS": "0.25",
        "SCHEDULE_MINUTES": "60"}


def test_one_composite_drift_alarm_changes_once_per_episode(built):
    template = built[0]
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    psi = next(k for k, a in alarms.items() if a["Properties"].get("MetricName") == "PSILowerBound")
    (composite,) = template.find_resources("AWS::CloudWatch::CompositeAlarm").values()
    rule = json.dumps(composite["Properties"]["AlarmRule"])
    assert psi in rule and " OR " not in rule
    assert "AlarmActions" not in composite["Properties"]  # its child notifies; retraining listens to it
    assert built[1]["endpoint"].alarms["drift"].alarm_name


def drift_stack(**props):
    stack = Stack(App(), "K", env={"account": "123456789012", "region": "us-east-1"})
    datasets = DatasetBucket(stack, "Datasets")
    MonitoredEndpoint(stack, "Classifier", endpoint_name="classifier-dev", image_uri=IMAGE,
                      model_data_bucket=datasets.bucket, model_data_key="models/classifier/model.tar.gz",
                      instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"), baseline_bucket=datasets,
                      vpc=endpoint_vpc(stack), **props)
    variables = next(f["Properties"]["Environment"]["Variables"] for f in
                     Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()
                     if f["Properties"]["Handler"] == "drift_handler.handler")
    return stack, variables


def test_the_drift_budget_is_spent_over_the_checks_of_90_days_and_a_per_check_level_is_deprecated():
    from aws_cdk.assertions import Annotations

    _, daily = drift_stack(drift_schedule=Duration.days(1), drift_false_alarms_per_90_days=0.5)
    assert (float(daily["SIGNIFICANCE"]), daily["SCHEDULE_MINUTES"]) == (pytest.approx(0.5 / 90), "1440")
    stack, variables = drift_stack(drift_significance=0.01)
    assert variables["SIGNIFICANCE"] == "0.01"
    [warning] = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("drift_significance"))
    assert "deprecated since 0.8.0" in warning.entry.data and "drift_false_alarms_per_90_days" in warning.entry.data


def test_a_kl_threshold_warns_that_it_no_longer_alarms():
    from aws_cdk.assertions import Annotations

    stack = Stack(App(), "K", env={"account": "123456789012", "region": "us-east-1"})
    datasets = DatasetBucket(stack, "Datasets")
    MonitoredEndpoint(stack, "Classifier", endpoint_name="classifier-dev", image_uri=IMAGE,
                      model_data_bucket=datasets.bucket, model_data_key="models/classifier/model.tar.gz",
                      instance_type="ml.m5.large", alerts=sns.Topic(stack, "Alerts"), baseline_bucket=datasets,
                      vpc=endpoint_vpc(stack), kl_threshold=0.3)
    [warning] = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("kl_threshold"))
    assert "has no effect since 0.5.0" in warning.entry.data


def p99_alarm(template):
    return next(a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("AlarmName") == "classifier-dev-p99-latency")


def test_p99_latency_alarm_in_microseconds_reads_0_in_low_traffic_periods(built):
    alarm = p99_alarm(built[0])
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (500000, 3, "notBreaching")
    # "ignore" would freeze the state below CloudWatch's sample threshold: an alarm in ALARM when traffic falls
    # would stay there, re-invoking its scale-out every period, and a quiet endpoint could never return to OK.
    assert "EvaluateLowSampleCountPercentile" not in alarm and "ExtendedStatistic" not in alarm
    [judged] = [m for m in alarm["Metrics"] if m.get("ReturnData", True)]
    assert judged["Expression"] == "IF(FILL(requests, 0) >= 1000, p99, 0)"
    stats = {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert {k: (v["Metric"]["MetricName"], v["Stat"], v["Period"]) for k, v in stats.items()} == {
        "p99": ("ModelLatency", "p99", 300), "requests": ("ModelLatency", "SampleCount", 300)}
    assert all({"Name": "VariantName", "Value": "AllTraffic"} in v["Metric"]["Dimensions"] for v in stats.values())
    assert "1000 requests (a quieter period reads 0: low traffic returns the alarm to OK)" in alarm["AlarmDescription"]


def test_5xx_error_rate_alarm(built):
    built[0].has_resource_properties("AWS::CloudWatch::Alarm", {
        "Threshold": 0.01, "Metrics": Match.array_with([Match.object_like(
            {"Expression": "IF(invocations > 0, errors / invocations, 0)"})])})


def test_a_failing_drift_check_alarms_with_the_baseline_command_with_and_without_the_app(built):
    alarms = built[0].find_resources("AWS::CloudWatch::Alarm", {"Properties": {
        "Namespace": "AWS/Lambda", "MetricName": "Errors", "Threshold": 1}})
    description = json.dumps(next(iter(alarms.values()))["Properties"]["AlarmDescription"])
    assert "./platform drift-baseline ENV ENDPOINT SAMPLE.csv" in description
    assert "python -m ml_platform_constructs drift-baseline SAMPLE.csv --endpoint" in description


def test_every_alarm_notifies_the_alert_topic_but_the_scaling_alarms(built):
    alarms = built[0].find_resources("AWS::CloudWatch::Alarm")
    # drift (2), latency, errors, drift check failing, the feature watch's notify; with auto_scaling, the latency
    # scale-out and the scale-in alarms' only actions are their scaling policies (the latency alarm notifies)
    assert len(alarms) >= 9
    notifying = [k for k, a in alarms.items() if [x for x in a["Properties"]["AlarmActions"]
                                                  if "Ref" in x and x["Ref"].startswith("Alerts")]]
    scaling = sorted(set(alarms) - set(notifying))
    assert [k.split("Alarm")[0] for k in scaling] == ["ClassifierLatencyScaleOut", "ClassifierScaleIn"]
    for key in scaling:
        [action] = alarms[key]["Properties"]["AlarmActions"]
        assert action["Ref"].startswith("ClassifierScalableTarget")


def test_target_tracking_on_invocations_per_instance(built):
    template, _ = built
    template.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {
        "ResourceId": "endpoint/classifier-dev/variant/AllTraffic", "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "MinCapacity": 1, "MaxCapacity": 4, "ServiceNamespace": "sagemaker"})
    template.has_resource_properties("AWS::ApplicationAutoScaling::ScalingPolicy", {
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({"TargetValue": 200, "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}})})


def test_dashboard_shows_traffic_latency_errors_and_drift_per_feature(built):
    body = json.dumps(resource(built[0], "AWS::CloudWatch::Dashboard"))
    for fragment in ("Invocations", "Model latency", "5xx error rate", "max PSI, its lower bound (alarms), significant PSI, KL", "PSI per feature", "SEARCH("):
        assert fragment in body


@pytest.fixture
def make():
    def build(**overrides):
        stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
        datasets = DatasetBucket(stack, "D")
        vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                          private_subnet_ids=["subnet-0123456789abcdef0"])
        props = {"endpoint_name": "e", "image_uri": IMAGE, "model_data_bucket": datasets.bucket,
                 "model_data_key": "models/m.tar.gz", "instance_type": "ml.m5.large", "alerts": sns.Topic(stack, "T"),
                 "baseline_bucket": datasets, "vpc": vpc, **overrides}
        return MonitoredEndpoint(stack, "E", **props)
    return build


@pytest.mark.parametrize("overrides,message", [
    ({"endpoint_name": "-bad"}, "endpoint_name='-bad' is invalid"),
    ({"instance_type": "m5.large"}, "instance_type='m5.large' is invalid: a SageMaker instance type"),
    ({"instance_type": "ml.g5.xlarge", "volume_key": "KEY"}, "volume_key='a key with instance_type ml.g5.xlarge' is invalid: no KMS key for instance types with local NVMe storage (g5)"),
    ({"sampling_percentage": 101}, "sampling_percentage=101 is invalid"),
    ({"csv_content_types": []}, "csv_content_types=[] is invalid: 1 to 10 content types"),
    ({"drift_schedule": Duration.seconds(30)}, "drift_schedule='30 seconds' is invalid"),
    ({"drift_schedule": Duration.days(2)}, "drift_schedule='2 days' is invalid: whole minutes, 1 minute to 1 day"),
    ({"drift_window": Duration.minutes(90)}, "drift_window='1 hour 30 minutes' is invalid: 1 to 24 whole hours"),
    ({"max_records_per_run": 0}, "max_records_per_run=0 is invalid"),
    ({"psi_threshold": 0}, "psi_threshold=0 is invalid"),
    ({"drift_false_alarms_per_90_days": 0}, "drift_false_alarms_per_90_days=0 is invalid: above 0 and at most 10"),
    ({"drift_significance": 0.5}, "drift_significance=0.5 is invalid"),
    ({"initial_instance_count": 0}, "initial_instance_count=0 is invalid"),
    ({"auto_scaling": EndpointAutoScaling(max_capacity=1, min_capacity=2, invocations_per_instance=10)}, "auto_scaling="),
    ({"image_uri": "docker.io/library/nginx:1.27"}, "image_uri='docker.io/library/nginx:1.27' is invalid: an Amazon ECR image"),
    ({"image_uri": "ghcr.io/team/model:1"}, "Fix: push it to ECR"),
])
def test_invalid_props_fail_with_the_rule(make, overrides, message):
    if overrides.get("volume_key") == "KEY":
        overrides["volume_key"] = kms.Key(Stack(App(), "K"), "K")
    with pytest.raises(ValidationError) as error:
        make(**overrides)
    assert message in str(error.value) and "Fix: " in str(error.value)


def test_nvme_instance_types_do_not_accept_a_volume_key():
    assert MonitoredEndpoint.accepts_volume_key("ml.m5.large")
    assert not MonitoredEndpoint.accepts_volume_key("ml.g4dn.xlarge")
    assert not MonitoredEndpoint.accepts_volume_key("ml.p4d.24xlarge")


def test_the_model_runs_network_isolated_by_default(built):
    assert resource(built[0], "AWS::SageMaker::Model")["EnableNetworkIsolation"] is True


def test_network_access_can_be_granted_with_a_warning(make):
    from aws_cdk.assertions import Annotations, Template

    endpoint = make(network_isolation=False)
    stack = Stack.of(endpoint)
    assert resource(Template.from_stack(stack), "AWS::SageMaker::Model")["EnableNetworkIsolation"] is False
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp("network_isolation=False"))


def test_captured_requests_leave_promptly_after_their_retention(built):
    """The capture bucket is versioned: expiry leaves a noncurrent version, which must go too (a day later)."""
    buckets = [b["Properties"] for b in built[0].find_resources("AWS::S3::Bucket").values()
               if any(r.get("Id") == "expire-captured-requests"
                      for r in b["Properties"].get("LifecycleConfiguration", {}).get("Rules", []))]
    rules = buckets[0]["LifecycleConfiguration"]["Rules"]
    assert {"Id": "expire-captured-requests", "Prefix": "capture/", "ExpirationInDays": 30, "Status": "Enabled"} in rules
    assert any(r.get("NoncurrentVersionExpiration") == {"NoncurrentDays": 1} for r in rules)


def test_without_a_logs_key_the_drift_logs_say_why_they_are_not_kms_encrypted(make):
    from aws_cdk.assertions import Template

    key_stack = make(logs_key=None)
    plain = Template.from_stack(Stack.of(key_stack)).find_resources("AWS::Logs::LogGroup")
    assert all("KmsKeyId" not in r["Properties"] for r in plain.values())
    assert all(r["Metadata"]["checkov"]["skip"][0]["id"] == "CKV_AWS_158" for r in plain.values())


@pytest.mark.parametrize("minutes,periods", [(1, 1440), (5, 288), (7, 205), (45, 32), (59, 24), (60, 24), (300, 5),
                                             (420, 4), (1440, 1)])
def test_the_not_judged_alarm_watches_about_a_day_within_cloudwatchs_limit(minutes, periods):
    """PutMetricAlarm refuses period x periods over a day for periods under an hour, over 7 days otherwise: a 7-minute
    schedule with ceil(86400 / 420) = 206 periods (24 hours 2 minutes) would fail at deploy."""
    from ml_platform_constructs.serving.monitored_endpoint import drift_day_periods

    period = minutes * 60
    assert drift_day_periods(Duration.minutes(minutes)) == periods
    assert period * periods <= (86400 if period < 3600 else 7 * 86400)
    assert period * (periods + 1) > 86400  # one more would pass a day: it watches about a day


def test_a_7_minute_drift_schedule_gets_a_not_judged_alarm_cloudwatch_accepts(make):
    from aws_cdk.assertions import Template

    template = Template.from_stack(Stack.of(make(drift_schedule=Duration.minutes(7))))
    [alarm] = [a["Properties"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()
               if a["Properties"].get("MetricName") == "DriftJudged"]
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (420, 205)


def test_the_endpoint_writes_to_a_log_group_of_its_own_with_retention_and_the_logs_key(built):
    """Its static name and DeletionPolicy Retain are also what the upgrade of an endpoint of before 0.6 needs: the
    deploy imports the group SageMaker made (constructs/docs/MonitoredEndpoint.md, CloudFormation's automatic import
    of named resources)."""
    template = built[0]
    groups = template.find_resources("AWS::Logs::LogGroup", {"Properties": {
        "LogGroupName": "/aws/sagemaker/Endpoints/classifier-dev"}})
    [(group_id, group)] = groups.items()
    assert group["Properties"]["RetentionInDays"] == 90
    assert group["Properties"]["KmsKeyId"]["Fn::GetAtt"][0].startswith("LogsKey")
    assert group["DeletionPolicy"] == "Retain"
    # Before the endpoint: SageMaker would otherwise create it on first start, never expiring, without the key.
    (endpoint,) = template.find_resources("AWS::SageMaker::Endpoint").values()
    assert group_id in endpoint["DependsOn"]
    role_policy = next(v for k, v in template.find_resources("AWS::IAM::Policy").items()
                       if k.startswith("ClassifierModelRole"))
    [logs_statement] = [s for s in role_policy["Properties"]["PolicyDocument"]["Statement"]
                        if any(a.startswith("logs:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    # On that group alone (CreateLogGroup as AWS's execution-role policy lists it, never on another group).
    assert sorted(logs_statement["Action"]) == ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams",
                                                "logs:PutLogEvents"]
    assert all("/aws/sagemaker/Endpoints/" in json.dumps(r) for r in logs_statement["Resource"])


def bare_isolated_vpc(stack):
    """Isolated subnets and no VPC endpoint at all."""
    return ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=0,
                   restrict_default_security_group=False,
                   subnet_configuration=[ec2.SubnetConfiguration(name="c", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])


def test_isolated_subnets_without_an_s3_endpoint_fail_at_synth_with_the_fix():
    stack = Stack(App(), "S", env={"account": "123456789012", "region": "us-east-1"})
    datasets = DatasetBucket(stack, "D")
    with pytest.raises(ValidationError) as error:
        MonitoredEndpoint(stack, "E", endpoint_name="e", image_uri=IMAGE, model_data_bucket=datasets.bucket,
                          model_data_key="m.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "T"),
                          baseline_bucket=datasets, vpc=bare_isolated_vpc(stack))
    message = str(error.value)
    assert message.startswith("MonitoredEndpoint: vpc='S/Vpc' is invalid: isolated subnets with VPC endpoints for "
                              "['s3'] (no NAT gateway: SageMaker loads the model artifact through it")
    assert "missing: ['s3']" in message
    assert "CreateEndpoint fails without one" in message
    assert "Fix: PlatformNetwork (it has an S3 gateway endpoint), vpc.add_gateway_endpoint('S3'" in message


@pytest.mark.parametrize("network", ["s3-gateway", "s3-interface", "nat", "imported"])
def test_an_s3_route_or_a_vpc_that_cannot_be_seen_passes(network):
    stack = Stack(App(), "N", env={"account": "123456789012", "region": "us-east-1"})
    if network == "nat":
        vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a"], nat_gateways=1,
                      restrict_default_security_group=False)
    elif network == "imported":
        vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0",
                                          availability_zones=["us-east-1a"], private_subnet_ids=["subnet-0123456789abcdef0"])
    else:
        vpc = bare_isolated_vpc(stack)
        if network == "s3-gateway":
            vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        else:
            vpc.add_interface_endpoint("S3", service=ec2.InterfaceVpcEndpointAwsService.S3)
    datasets = DatasetBucket(stack, "D")
    endpoint = MonitoredEndpoint(stack, "E", endpoint_name="e", image_uri=IMAGE, model_data_bucket=datasets.bucket,
                                 model_data_key="m.tar.gz", instance_type="ml.m5.large", alerts=sns.Topic(stack, "T"),
                                 baseline_bucket=datasets, vpc=vpc)
    assert endpoint.endpoint.endpoint_name == "e"  # built: the check stayed quiet
