"""S3's lifecycle and Intelligent-Tiering rules, enforced at synth (no synthesis needed: pure checks)."""

import pytest
from aws_cdk import Duration, Token
from aws_cdk import aws_s3 as s3

from ml_platform_constructs import ValidationError, default_tiering_rules
from ml_platform_constructs.data.s3_rules import validate_intelligent_tiering, validate_lifecycle_rules

DIRECT = ("datasets/", "checkpoints/")
SC = s3.StorageClass


def rule(*transitions, prefix="logs/", noncurrent=(), rule_id="r", **kwargs):
    return s3.LifecycleRule(
        id=rule_id, prefix=prefix,
        transitions=[s3.Transition(storage_class=c, transition_after=Duration.days(d)) for c, d in transitions] or None,
        noncurrent_version_transitions=[s3.NoncurrentVersionTransition(storage_class=c, transition_after=Duration.days(d))
                                        for c, d in noncurrent] or None,
        **kwargs)


def check(*rules):
    validate_lifecycle_rules(list(rules), direct_read_prefixes=DIRECT)


def test_default_tiering_rules_pass_every_check():
    check(*default_tiering_rules())


def test_standard_ia_before_30_days_is_rejected_with_prop_value_range_and_fix():
    with pytest.raises(ValidationError) as error:
        check(rule((SC.INFREQUENT_ACCESS, 7), rule_id="warm-logs"))
    message = str(error.value)
    assert "lifecycle rule warm-logs transitions" in message
    assert "'STANDARD_IA after 7 days'" in message
    assert "only after at least 30 days" in message
    assert "Fix: transition after 30 days or more, or use INTELLIGENT_TIERING" in message


def test_one_zone_ia_before_30_days_is_rejected():
    with pytest.raises(ValidationError, match="ONEZONE_IA only after at least 30 days"):
        check(rule((SC.ONE_ZONE_INFREQUENT_ACCESS, 29)))


def test_standard_ia_at_30_days_is_accepted():
    check(rule((SC.INFREQUENT_ACCESS, 30)))


def test_intelligent_tiering_and_glacier_accept_day_zero():
    check(rule((SC.INTELLIGENT_TIERING, 0), rule_id="a"), rule((SC.GLACIER, 0), rule_id="b"))


def test_noncurrent_transition_to_ia_before_30_days_is_rejected():
    with pytest.raises(ValidationError, match="noncurrent_version_transitions.*STANDARD_IA after 10 days"):
        check(rule(noncurrent=[(SC.INFREQUENT_ACCESS, 10)]))


def test_transition_against_the_supported_waterfall_is_rejected():
    with pytest.raises(ValidationError, match="'GLACIER -> STANDARD_IA'.*supports transitions from GLACIER only to"):
        check(rule((SC.GLACIER, 10), (SC.INFREQUENT_ACCESS, 200)))


def test_intelligent_tiering_to_glacier_instant_retrieval_is_rejected():
    with pytest.raises(ValidationError, match="INTELLIGENT_TIERING -> GLACIER_IR"):
        check(rule((SC.INTELLIGENT_TIERING, 7), (SC.GLACIER_INSTANT_RETRIEVAL, 30)))


def test_transitions_out_of_age_order_are_rejected():
    with pytest.raises(ValidationError, match="must come later than the previous one"):
        check(rule((SC.GLACIER_INSTANT_RETRIEVAL, 60), (SC.GLACIER, 60)))


def test_glacier_less_than_30_days_after_standard_ia_is_rejected():
    with pytest.raises(ValidationError) as error:
        check(rule((SC.INFREQUENT_ACCESS, 30), (SC.GLACIER, 45)))
    assert "less than 30 days after a STANDARD_IA transition" in str(error.value)
    assert "Fix: transition to GLACIER at 60 days or later" in str(error.value)


def test_glacier_30_days_after_standard_ia_is_accepted():
    check(rule((SC.INFREQUENT_ACCESS, 30), (SC.GLACIER, 60)))


def test_expiration_not_after_last_transition_is_rejected():
    with pytest.raises(ValidationError, match="expiration='30 days'.*later than the last transition"):
        check(rule((SC.GLACIER, 30), expiration=Duration.days(30)))


def test_noncurrent_expiration_not_after_noncurrent_transition_is_rejected():
    with pytest.raises(ValidationError, match="noncurrent_version_expiration"):
        check(rule(noncurrent=[(SC.GLACIER, 40)], noncurrent_version_expiration=Duration.days(20)))


def test_abort_multipart_upload_with_tag_filter_is_rejected():
    with pytest.raises(ValidationError, match="AbortIncompleteMultipartUpload in a rule that filters on tags"):
        check(rule(tag_filters={"team": "a"}, abort_incomplete_multipart_upload_after=Duration.days(1)))


def test_expired_object_delete_marker_with_tag_filter_is_rejected():
    with pytest.raises(ValidationError, match="ExpiredObjectDeleteMarker in a rule that filters on tags"):
        check(rule(tag_filters={"team": "a"}, expired_object_delete_marker=True))


def test_rule_without_action_is_rejected():
    with pytest.raises(ValidationError, match="needs at least one transition or expiration action"):
        check(s3.LifecycleRule(id="empty", prefix="x/"))


def test_duplicate_rule_ids_are_rejected():
    with pytest.raises(ValidationError, match="rule ids must be unique"):
        check(rule((SC.GLACIER, 1), rule_id="same"), rule((SC.GLACIER, 2), rule_id="same"))


def test_rule_id_over_255_characters_is_rejected():
    with pytest.raises(ValidationError, match="at most 255 characters"):
        check(rule((SC.GLACIER, 1), rule_id="x" * 256))


def test_more_than_1000_rules_are_rejected():
    with pytest.raises(ValidationError, match="at most 1000 rules"):
        check(*[rule((SC.GLACIER, 1), rule_id=None)] * 1001)


@pytest.mark.parametrize("storage_class", [SC.GLACIER, SC.DEEP_ARCHIVE])
def test_restore_gated_class_on_a_direct_read_prefix_is_rejected(storage_class):
    with pytest.raises(ValidationError) as error:
        check(rule((storage_class, 90), prefix="datasets/images/"))
    assert "read directly by training" in str(error.value)
    assert "Fix: use INTELLIGENT_TIERING or GLACIER_IR" in str(error.value)


def test_restore_gated_class_on_the_whole_bucket_is_rejected():
    with pytest.raises(ValidationError, match="objects under 'datasets/'"):
        check(rule((SC.GLACIER, 90), prefix=None))


def test_instant_retrieval_on_checkpoints_is_accepted():
    check(rule((SC.GLACIER_INSTANT_RETRIEVAL, 30), prefix="checkpoints/"))


def test_unresolved_token_durations_are_left_to_deploy_time():
    check(rule((SC.INFREQUENT_ACCESS, Token.as_number({"Ref": "Days"}))))


def tiering(name="archive", prefix="logs/", archive=None, deep=None):
    return s3.IntelligentTieringConfiguration(
        name=name, prefix=prefix,
        archive_access_tier_time=Duration.days(archive) if archive is not None else None,
        deep_archive_access_tier_time=Duration.days(deep) if deep is not None else None)


def check_tiering(*configs):
    validate_intelligent_tiering(list(configs), direct_read_prefixes=DIRECT)


def test_archive_tiers_within_s3_ranges_are_accepted():
    check_tiering(tiering(archive=90, deep=180))


@pytest.mark.parametrize("archive,deep,match", [
    (89, None, r"archive_access_tier_time='89 days'.*S3 allows 90 to 730 days"),
    (731, None, r"archive_access_tier_time='731 days'"),
    (None, 179, r"deep_archive_access_tier_time='179 days'.*S3 allows 180 to 730 days"),
    (200, 200, r"Deep Archive Access comes after Archive Access"),
    (None, None, r"at least one of the Archive Access and Deep Archive Access tiers"),
])
def test_archive_tier_days_s3_rejects(archive, deep, match):
    with pytest.raises(ValidationError, match=match):
        check_tiering(tiering(archive=archive, deep=deep))


def test_archive_tiers_over_a_direct_read_prefix_are_rejected():
    with pytest.raises(ValidationError, match=r"prefix='<whole bucket>'.*need a restore before a read"):
        check_tiering(tiering(prefix=None, archive=90))
