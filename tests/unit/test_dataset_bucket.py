"""DatasetBucket: one behaviour per test, on two buckets synthesized once for the module."""

import pytest
from aws_cdk import App, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Capture, Match, Template

from ml_platform_constructs import DatasetBucket, ValidationError


@pytest.fixture(scope="module")
def built(synth_stack):
    parts = {}

    def body(stack: Stack) -> None:
        parts["defaults"] = DatasetBucket(stack, "Defaults")
        key = kms.Key(stack, "PlatformKey", enable_key_rotation=True)
        parts["custom"] = DatasetBucket(
            stack, "Custom", encryption_key=key,
            server_access_logs_bucket=parts["defaults"].access_logs_bucket, server_access_logs_prefix="custom/",
            intelligent_tiering_configurations=[s3.IntelligentTieringConfiguration(
                name="logs-archive", prefix="logs/", archive_access_tier_time=Duration.days(90))],
            noncurrent_version_expiration=Duration.days(90), removal_policy=RemovalPolicy.DESTROY)
        for name in ("Reader", "Writer", "Trainer"):
            parts[name] = iam.Role(stack, name, assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
        parts["defaults"].grant_read(parts["Reader"], prefix="datasets/")
        parts["defaults"].grant_write_prefix(parts["Writer"], DatasetBucket.checkpoint_prefix("fleet-a"))
        parts["defaults"].grant_read_write(parts["Trainer"])
        parts["stack"] = stack

    template = synth_stack(body)
    return template, parts


def bucket_props(template: Template, logical_prefix: str) -> dict:
    buckets = template.find_resources("AWS::S3::Bucket")
    return next(v["Properties"] for k, v in buckets.items() if k.startswith(logical_prefix) and "AccessLogs" not in k)


def test_main_child_is_named_resource(built):
    _, parts = built
    assert parts["defaults"].node.default_child is parts["defaults"].bucket
    assert parts["defaults"].bucket.node.id == "Resource"


def test_default_encryption_is_its_own_rotating_kms_key_with_bucket_key(built):
    template, parts = built
    props = bucket_props(template, "Defaults")
    rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert rule["BucketKeyEnabled"] is True
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    key_id = Capture()
    template.has_resource_properties("AWS::S3::Bucket", Match.object_like({"BucketEncryption": {
        "ServerSideEncryptionConfiguration": [Match.object_like(
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]}}})]}}))
    assert isinstance(parts["defaults"].encryption_key, kms.Key)
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True,
                                                        "Description": Match.string_like_regexp("Defaults dataset bucket")})


def test_given_key_is_used_and_no_key_is_created_for_it(built):
    template, parts = built
    # Defaults' own key and the test's PlatformKey: the custom bucket adds none.
    assert len(template.find_resources("AWS::KMS::Key")) == 2
    assert parts["custom"].encryption_key.node.id == "PlatformKey"


def test_tls_only_and_tls_1_2_minimum_in_bucket_policy(built):
    template, _ = built
    template.has_resource_properties("AWS::S3::BucketPolicy", {"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Effect": "Deny", "Action": "s3:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}),
        Match.object_like({"Effect": "Deny", "Action": "s3:*",
                           "Condition": {"NumericLessThan": {"s3:TlsVersion": 1.2}}}),
    ])}})


def test_public_access_blocked_and_acls_disabled(built):
    template, _ = built
    props = bucket_props(template, "Defaults")
    assert props["PublicAccessBlockConfiguration"] == {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                                       "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}


def test_versioned(built):
    template, _ = built
    assert bucket_props(template, "Defaults")["VersioningConfiguration"] == {"Status": "Enabled"}


def test_server_access_logs_go_to_an_sse_s3_log_bucket_that_expires_them(built):
    template, _ = built
    logging = bucket_props(template, "Defaults")["LoggingConfiguration"]
    assert logging["LogFilePrefix"] == "Defaults/"
    logs_id = logging["DestinationBucketName"]["Ref"]
    logs_bucket = template.find_resources("AWS::S3::Bucket")[logs_id]["Properties"]
    assert logs_bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    assert logs_bucket["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 365


def test_shared_log_bucket_is_used_with_its_own_prefix(built):
    template, _ = built
    defaults_logging = bucket_props(template, "Defaults")["LoggingConfiguration"]
    custom_logging = bucket_props(template, "Custom")["LoggingConfiguration"]
    assert custom_logging == {**defaults_logging, "LogFilePrefix": "custom/"}


def test_housekeeping_rule_aborts_uploads_expires_old_versions_and_delete_markers(built):
    template, _ = built
    rules = bucket_props(template, "Defaults")["LifecycleConfiguration"]["Rules"]
    assert rules[0] == {"Id": "housekeeping", "Status": "Enabled", "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
                        "NoncurrentVersionExpiration": {"NoncurrentDays": 30}, "ExpiredObjectDeleteMarker": True}


def test_default_tiering_is_hot_warm_cold_per_prefix(built):
    template, _ = built
    rules = {r["Id"]: r for r in bucket_props(template, "Defaults")["LifecycleConfiguration"]["Rules"]}
    assert rules["datasets-warm-intelligent-tiering"]["Prefix"] == "datasets/"
    assert rules["datasets-warm-intelligent-tiering"]["Transitions"] == [
        {"StorageClass": "INTELLIGENT_TIERING", "TransitionInDays": 7}]
    assert rules["checkpoints-cold-glacier-ir"]["Transitions"] == [{"StorageClass": "GLACIER_IR", "TransitionInDays": 30}]
    assert rules["logs-cold-glacier"]["Transitions"] == [{"StorageClass": "GLACIER", "TransitionInDays": 30}]
    assert rules["logs-cold-glacier"]["ExpirationInDays"] == 365


def test_no_restore_gated_class_on_datasets_or_checkpoints_by_default(built):
    template, _ = built
    for rule in bucket_props(template, "Defaults")["LifecycleConfiguration"]["Rules"]:
        if rule.get("Prefix", "").startswith(("datasets/", "checkpoints/")):
            assert {t["StorageClass"] for t in rule["Transitions"]} <= {"INTELLIGENT_TIERING", "GLACIER_IR"}


def test_no_intelligent_tiering_archive_configuration_by_default(built):
    template, _ = built
    assert "IntelligentTieringConfigurations" not in bucket_props(template, "Defaults")


def test_configured_archive_tier_is_rendered(built):
    template, _ = built
    assert bucket_props(template, "Custom")["IntelligentTieringConfigurations"] == [{
        "Id": "logs-archive", "Prefix": "logs/", "Status": "Enabled",
        "Tierings": [{"AccessTier": "ARCHIVE_ACCESS", "Days": 90}]}]


def test_noncurrent_version_expiration_is_configurable(built):
    template, _ = built
    rules = bucket_props(template, "Custom")["LifecycleConfiguration"]["Rules"]
    assert rules[0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 90}


def test_stateful_resources_are_retained_by_default(built):
    template, _ = built
    resources = template.to_json()["Resources"]
    for logical_id, resource in resources.items():
        if logical_id.startswith("Defaults") and resource["Type"] in ("AWS::S3::Bucket", "AWS::KMS::Key"):
            assert resource["DeletionPolicy"] == "Retain", logical_id
            assert resource["UpdateReplacePolicy"] == "Retain", logical_id


def test_destroy_removal_policy_deletes_and_warns(built):
    template, parts = built
    resources = template.find_resources("AWS::S3::Bucket")
    custom = next(v for k, v in resources.items() if k.startswith("Custom"))
    assert custom["DeletionPolicy"] == "Delete"
    Annotations.from_stack(parts["stack"]).has_warning(
        "/Test/Custom", Match.string_like_regexp("removal_policy=DESTROY: deleting the stack deletes this bucket only when it is empty"))


def test_no_auto_delete_custom_resource(built):
    template, _ = built
    assert not template.find_resources("Custom::S3AutoDeleteObjects")
    assert not template.find_resources("AWS::Lambda::Function")


def test_grant_read_is_scoped_to_the_prefix_and_decrypts(built):
    template, parts = built
    policies = template.find_resources("AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": Match.string_like_regexp("^Reader")}]}})
    statements = next(iter(policies.values()))["Properties"]["PolicyDocument"]["Statement"]
    s3_read = next(s for s in statements if "s3:GetObject*" in s["Action"])
    assert any("/datasets/*" in str(resource) for resource in s3_read["Resource"])
    assert not any(str(resource).endswith("/*\"]}") for resource in s3_read["Resource"])
    assert any("kms:Decrypt" in s["Action"] for s in statements)
    assert not any("s3:PutObject" in s["Action"] for s in statements)


def test_grant_write_prefix_puts_only_under_the_checkpoint_prefix(built):
    template, _ = built
    policies = template.find_resources("AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": Match.string_like_regexp("^Writer")}]}})
    statements = next(iter(policies.values()))["Properties"]["PolicyDocument"]["Statement"]
    put = next(s for s in statements if "s3:PutObject" in s["Action"])
    assert "/checkpoints/fleet-a/*" in str(put["Resource"])
    assert not any("s3:GetObject*" in s["Action"] or "s3:DeleteObject*" in s["Action"] for s in statements)
    assert any("kms:GenerateDataKey*" in s["Action"] for s in statements)


def test_grant_read_write_covers_the_whole_bucket(built):
    template, _ = built
    policies = template.find_resources("AWS::IAM::Policy", {"Properties": {"Roles": [{"Ref": Match.string_like_regexp("^Trainer")}]}})
    statements = next(iter(policies.values()))["Properties"]["PolicyDocument"]["Statement"]
    actions = {a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert {"s3:GetObject*", "s3:PutObject", "s3:DeleteObject*", "kms:Decrypt", "kms:GenerateDataKey*"} <= actions


def test_grants_return_an_iam_grant(built):
    _, parts = built
    assert isinstance(parts["defaults"].grant_read(parts["Reader"]), iam.Grant)


def test_storage_metrics_use_s3_daily_metric_names_and_dimensions(built):
    _, parts = built
    size = parts["defaults"].metric_bucket_size_bytes("IntelligentTieringIAStorage")
    assert (size.namespace, size.metric_name, size.period.to_days(), size.statistic) == ("AWS/S3", "BucketSizeBytes", 1, "Average")
    assert size.dimensions["StorageType"] == "IntelligentTieringIAStorage"
    objects = parts["defaults"].metric_number_of_objects()
    assert (objects.metric_name, objects.dimensions["StorageType"]) == ("NumberOfObjects", "AllStorageTypes")


def test_unknown_storage_type_metric_is_rejected(built):
    _, parts = built
    with pytest.raises(ValidationError, match="storage_type='Glacier'.*StorageType dimension values"):
        parts["defaults"].metric_bucket_size_bytes("Glacier")


def test_checkpoint_prefix_is_per_fleet():
    assert DatasetBucket.checkpoint_prefix("fleet-a") == "checkpoints/fleet-a/"
    with pytest.raises(ValidationError, match="fleet_name='a/b'"):
        DatasetBucket.checkpoint_prefix("a/b")


# --- validation: each fails before any resource exists -------------------------------------------------------

@pytest.fixture
def scope():
    return Stack(App(), "Scope")


def test_bad_bucket_name_is_rejected_before_resources(scope):
    with pytest.raises(ValidationError) as error:
        DatasetBucket(scope, "B", bucket_name="My_Bucket")
    assert "bucket_name='My_Bucket'" in str(error.value)
    assert "3-63 lowercase letters" in str(error.value)
    assert scope.node.try_find_child("B") is None  # a refused construct leaves nothing in the tree


def test_ip_address_bucket_name_is_rejected(scope):
    with pytest.raises(ValidationError, match="not IP addresses"):
        DatasetBucket(scope, "B", bucket_name="192.168.1.1")


def test_user_rule_s3_would_reject_fails_naming_the_rule(scope):
    with pytest.raises(ValidationError, match="lifecycle rule hot-to-ia transitions"):
        DatasetBucket(scope, "B", lifecycle_rules=[s3.LifecycleRule(
            id="hot-to-ia", prefix="logs/",
            transitions=[s3.Transition(storage_class=s3.StorageClass.INFREQUENT_ACCESS, transition_after=Duration.days(7))])])


def test_prefix_without_trailing_slash_is_rejected(scope):
    with pytest.raises(ValidationError, match="direct_read_prefixes='datasets'.*ending in '/'"):
        DatasetBucket(scope, "B", direct_read_prefixes=["datasets"])


@pytest.mark.parametrize("prop", ["noncurrent_version_expiration", "abort_incomplete_multipart_upload_after",
                                  "access_logs_retention"])
def test_sub_day_durations_are_rejected(scope, prop):
    with pytest.raises(ValidationError, match=f"{prop}='12 hours'.*whole number of days"):
        DatasetBucket(scope, "B", **{prop: Duration.hours(12)})


def test_add_lifecycle_rule_validates_and_rejects_duplicate_ids(scope):
    bucket = DatasetBucket(scope, "B")
    bucket.add_lifecycle_rule(s3.LifecycleRule(id="tmp", prefix="tmp/", expiration=Duration.days(3)))
    with pytest.raises(ValidationError, match="rule ids must be unique"):
        bucket.add_lifecycle_rule(s3.LifecycleRule(id="tmp", prefix="tmp2/", expiration=Duration.days(3)))
    with pytest.raises(ValidationError, match="read directly by training"):
        bucket.add_lifecycle_rule(s3.LifecycleRule(
            id="bad", prefix="datasets/", transitions=[s3.Transition(storage_class=s3.StorageClass.DEEP_ARCHIVE,
                                                                     transition_after=Duration.days(200))]))
    rules = Template.from_stack(scope).find_resources("AWS::S3::Bucket")
    ids = [r["Id"] for b in rules.values() for r in b["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])]
    assert ids.count("tmp") == 1 and "bad" not in ids
