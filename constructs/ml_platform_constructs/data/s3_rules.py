"""S3's own rules for lifecycle and Intelligent-Tiering configurations, checked at synth time.

Every check here is one that S3 enforces when the bucket is created or updated (so CloudFormation would fail
at deploy time), plus the platform's one rule of its own: data that jobs read directly never sits in a
storage class that needs a restore before a read.

Sources (AWS documentation):
- Transition days and classes: https://docs.aws.amazon.com/AmazonS3/latest/API/API_Transition.html
- Minimum ages, supported transitions, the 30-day gap after Standard-IA/One Zone-IA:
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-transition-general-considerations.html
- Tag filters vs AbortIncompleteMultipartUpload/ExpiredObjectDeleteMarker, 1,000 rules, 255-character ids:
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html
- Expiration after transition: https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-s3-bucket-rule.html
- Intelligent-Tiering archive tiers (90-730 and 180-730 days, restore needed):
  https://docs.aws.amazon.com/AmazonS3/latest/API/API_Tiering.html
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/intelligent-tiering-managing.html
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from aws_cdk import Duration, Token
from aws_cdk import aws_s3 as s3

from ..errors import ValidationError

MAX_LIFECYCLE_RULES = 1000
MAX_RULE_ID_LENGTH = 255
IA_MINIMUM_DAYS = 30
IA_MINIMUM_STORAGE_DAYS = 30
ARCHIVE_ACCESS_DAYS = (90, 730)
DEEP_ARCHIVE_ACCESS_DAYS = (180, 730)

_IA_CLASSES = frozenset({"STANDARD_IA", "ONEZONE_IA"})
# Classes whose objects must be restored before they can be read.
RESTORE_GATED_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
# The supported transitions ("waterfall") from the S3 User Guide; any class may also go to GLACIER or DEEP_ARCHIVE
# (GLACIER to DEEP_ARCHIVE only), and nothing goes back to STANDARD.
_ALLOWED_NEXT = {
    "STANDARD": frozenset({"STANDARD_IA", "INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"}),
    "STANDARD_IA": frozenset({"INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"}),
    "INTELLIGENT_TIERING": frozenset({"ONEZONE_IA", "GLACIER", "DEEP_ARCHIVE"}),
    "ONEZONE_IA": frozenset({"GLACIER", "DEEP_ARCHIVE"}),
    "GLACIER_IR": frozenset({"GLACIER", "DEEP_ARCHIVE"}),
    "GLACIER": frozenset({"DEEP_ARCHIVE"}),
    "DEEP_ARCHIVE": frozenset(),
}

# The documented "at least 30 days after the Standard-IA/One Zone-IA transition" targets.
_GAP_AFTER_IA = frozenset({"ONEZONE_IA", "GLACIER", "DEEP_ARCHIVE"})

_WHO = "DatasetBucket"


def _days(duration: Optional[Duration]) -> Optional[float]:
    """Whole days of a duration, or None when absent or an unresolved token (checked at deploy time instead)."""
    if duration is None or duration.is_unresolved():
        return None
    return duration.to_days()


def _covers(rule_prefix: Optional[str], protected_prefix: str) -> bool:
    """Whether objects under protected_prefix can match a rule with rule_prefix."""
    prefix = rule_prefix or ""
    return protected_prefix.startswith(prefix) or prefix.startswith(protected_prefix)


def rule_name(rule: s3.LifecycleRule, index: int) -> str:
    return rule.id or f"lifecycle_rules[{index}] (prefix {rule.prefix or '<whole bucket>'!r})"


def validate_lifecycle_rules(
    rules: Sequence[s3.LifecycleRule],
    *,
    direct_read_prefixes: Sequence[str],
    existing_ids: Iterable[str] = (),
) -> None:
    """Raise ValidationError for the first rule that S3 would reject or that would gate direct reads."""
    seen_ids = set(existing_ids)
    if len(rules) + len(seen_ids) > MAX_LIFECYCLE_RULES:
        raise ValidationError(
            _WHO, "lifecycle_rules", f"{len(rules) + len(seen_ids)} rules", f"S3 accepts at most {MAX_LIFECYCLE_RULES} rules per bucket",
            "merge rules that share a prefix",
        )
    for index, rule in enumerate(rules):
        name = rule_name(rule, index)
        if rule.id is not None and not Token.is_unresolved(rule.id):
            if len(rule.id) > MAX_RULE_ID_LENGTH:
                raise ValidationError(_WHO, f"lifecycle rule {name[:40]}... id", f"{len(rule.id)} characters",
                                      f"S3 rule ids are at most {MAX_RULE_ID_LENGTH} characters", "shorten the id")
            if rule.id in seen_ids:
                raise ValidationError(_WHO, f"lifecycle rule {name} id", rule.id, "rule ids must be unique in a bucket",
                                      "give each rule its own id")
            seen_ids.add(rule.id)
        _validate_rule(rule, name, direct_read_prefixes)


def _validate_rule(rule: s3.LifecycleRule, name: str, direct_read_prefixes: Sequence[str]) -> None:
    prop = f"lifecycle rule {name}"
    has_action = any([
        rule.abort_incomplete_multipart_upload_after, rule.expiration, rule.expiration_date,
        rule.expired_object_delete_marker, rule.noncurrent_version_expiration, rule.noncurrent_version_transitions,
        rule.transitions,
    ])
    if not has_action:
        raise ValidationError(_WHO, prop, "no action", "S3 needs at least one transition or expiration action in a rule",
                              "add a transition or expiration, or drop the rule")
    if rule.tag_filters:
        if rule.abort_incomplete_multipart_upload_after is not None:
            raise ValidationError(_WHO, f"{prop} abort_incomplete_multipart_upload_after",
                                  _fmt(rule.abort_incomplete_multipart_upload_after),
                                  "S3 rejects AbortIncompleteMultipartUpload in a rule that filters on tags",
                                  "move it to a rule without tag_filters")
        if rule.expired_object_delete_marker:
            raise ValidationError(_WHO, f"{prop} expired_object_delete_marker", True,
                                  "S3 rejects ExpiredObjectDeleteMarker in a rule that filters on tags",
                                  "move it to a rule without tag_filters")
    _validate_transitions(prop, "transitions", [(t.storage_class.value, _days(t.transition_after)) for t in rule.transitions or []],
                          _days(rule.expiration), "expiration")
    _validate_transitions(prop, "noncurrent_version_transitions",
                          [(t.storage_class.value, _days(t.transition_after)) for t in rule.noncurrent_version_transitions or []],
                          _days(rule.noncurrent_version_expiration), "noncurrent_version_expiration")
    if rule.prefix is not None and Token.is_unresolved(rule.prefix):
        return
    for transition in rule.transitions or []:
        storage_class = transition.storage_class.value
        if storage_class not in RESTORE_GATED_CLASSES:
            continue
        for protected in direct_read_prefixes:
            if _covers(rule.prefix, protected):
                raise ValidationError(
                    _WHO, f"{prop} transitions", storage_class,
                    f"objects under {protected!r} are read directly by training, resume and snapshot builds, and "
                    f"{storage_class} needs a restore before every read",
                    "use INTELLIGENT_TIERING or GLACIER_IR (both readable in milliseconds), or narrow the rule's prefix",
                )


def _validate_transitions(prop: str, field: str, transitions: list[tuple[str, Optional[float]]],
                          expiration_days: Optional[float], expiration_field: str) -> None:
    previous_class, previous_days = "STANDARD", None
    for storage_class, days in transitions:
        if days is not None and storage_class in _IA_CLASSES and days < IA_MINIMUM_DAYS:
            raise ValidationError(
                _WHO, f"{prop} {field}", f"{storage_class} after {days:g} days",
                f"S3 moves objects to {storage_class} only after at least {IA_MINIMUM_DAYS} days",
                f"transition after {IA_MINIMUM_DAYS} days or more, or use INTELLIGENT_TIERING, which accepts any age",
            )
        if storage_class not in _ALLOWED_NEXT[previous_class]:
            raise ValidationError(
                _WHO, f"{prop} {field}", f"{previous_class} -> {storage_class}",
                f"S3 supports transitions from {previous_class} only to {sorted(_ALLOWED_NEXT[previous_class]) or 'nothing'}",
                "order the transitions along S3's supported transitions or drop one",
            )
        if days is not None and previous_days is not None:
            if days <= previous_days:
                raise ValidationError(
                    _WHO, f"{prop} {field}", f"{storage_class} after {days:g} days",
                    f"each transition must come later than the previous one ({previous_class} after {previous_days:g} days)",
                    "order the transitions by age",
                )
            if (previous_class in _IA_CLASSES and storage_class in _GAP_AFTER_IA
                    and days - previous_days < IA_MINIMUM_STORAGE_DAYS):
                raise ValidationError(
                    _WHO, f"{prop} {field}", f"{storage_class} after {days:g} days",
                    f"S3 rejects a transition less than {IA_MINIMUM_STORAGE_DAYS} days after a {previous_class} transition "
                    f"(here after {previous_days:g} days)",
                    f"transition to {storage_class} at {previous_days + IA_MINIMUM_STORAGE_DAYS:g} days or later",
                )
        previous_class, previous_days = storage_class, days if days is not None else previous_days
    if expiration_days is not None and previous_days is not None and expiration_days <= previous_days:
        raise ValidationError(
            _WHO, f"{prop} {expiration_field}", f"{expiration_days:g} days",
            f"S3 requires expiration later than the last transition ({previous_class} after {previous_days:g} days)",
            f"expire after more than {previous_days:g} days or drop the transition",
        )


def validate_intelligent_tiering(
    configurations: Sequence[s3.IntelligentTieringConfiguration], *, direct_read_prefixes: Sequence[str]
) -> None:
    """Raise ValidationError for an archive-tier configuration S3 would reject or that would gate direct reads."""
    for config in configurations:
        prop = f"intelligent_tiering_configurations[{config.name!r}]"
        archive = _days(config.archive_access_tier_time)
        deep = _days(config.deep_archive_access_tier_time)
        if config.archive_access_tier_time is None and config.deep_archive_access_tier_time is None:
            raise ValidationError(_WHO, prop, "no tier", "S3 needs at least one of the Archive Access and Deep Archive Access tiers",
                                  "set archive_access_tier_time and/or deep_archive_access_tier_time")
        for field, days, (low, high) in (("archive_access_tier_time", archive, ARCHIVE_ACCESS_DAYS),
                                         ("deep_archive_access_tier_time", deep, DEEP_ARCHIVE_ACCESS_DAYS)):
            if days is not None and not low <= days <= high:
                raise ValidationError(_WHO, f"{prop}.{field}", f"{days:g} days", f"S3 allows {low} to {high} days",
                                      f"choose a value between {low} and {high} days")
        if archive is not None and deep is not None and deep <= archive:
            raise ValidationError(_WHO, f"{prop}.deep_archive_access_tier_time", f"{deep:g} days",
                                  f"Deep Archive Access comes after Archive Access ({archive:g} days)",
                                  f"set it above {archive:g} days")
        if config.prefix is not None and Token.is_unresolved(config.prefix):
            continue
        for protected in direct_read_prefixes:
            if _covers(config.prefix, protected):
                raise ValidationError(
                    _WHO, f"{prop}.prefix", config.prefix or "<whole bucket>",
                    f"the optional archive tiers need a restore before a read, and objects under {protected!r} are read "
                    "directly by jobs",
                    "give the configuration a prefix outside the direct-read prefixes (for example 'logs/')",
                )


def _fmt(duration: Duration) -> str:
    return duration.to_human_string() if not duration.is_unresolved() else "<token>"
