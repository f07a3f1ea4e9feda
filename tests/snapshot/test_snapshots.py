"""Snapshot of every stack of every environment (update with: ./platform test --snapshot-update)."""

import json
import re

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import STACKS

ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def normalized(template: dict) -> dict:
    """The template without what changes on every CDK upgrade or asset rebuild."""
    text = ASSET_HASH.sub("<asset-hash>", json.dumps(template, sort_keys=True))
    result = json.loads(text)
    result.get("Resources", {}).pop("CDKMetadata", None)
    result.get("Conditions", {}).pop("CDKMetadataAvailable", None)
    return result


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_snapshot(templates, snapshot_json, stack):
    assert normalized(templates[stack].to_json()) == snapshot_json


def test_normalization_strips_asset_hashes_and_cdk_metadata():
    template = {"Resources": {"CDKMetadata": {"Type": "AWS::CDK::Metadata"},
                              "Fn": {"Properties": {"Code": {"S3Key": "a" * 64 + ".zip"}}}}}
    assert normalized(template) == {"Resources": {"Fn": {"Properties": {"Code": {"S3Key": "<asset-hash>.zip"}}}}}
