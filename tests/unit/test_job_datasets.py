"""A dataset as a local directory for frameworks that read files (issue 35): the EBS preload when mounted, a local
datasets directory as it is, an S3 prefix downloaded once per host (a retry or another rank copies nothing; a changed
object is fetched again)."""

import boto3
import pytest
from moto import mock_aws

from ml_platform_job.datasets import MANIFEST, local_dataset


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket="datasets")
        for key, body in (("mnist/v1/train/images.bin", b"pixels"), ("mnist/v1/labels.bin", b"labels"),
                          ("mnist/v2/labels.bin", b"other version")):
            client.put_object(Bucket="datasets", Key=f"datasets/{key}", Body=body)
        yield client


def test_an_s3_prefix_comes_to_local_disk_once_and_again_only_when_it_changed(s3, tmp_path, monkeypatch):
    env = {"ML_PLATFORM_DATASETS_URI": "s3://datasets/datasets/"}
    root = local_dataset("mnist", "v1", env=env, s3=s3, mounts=str(tmp_path / "data"), cache=str(tmp_path / "cache"))
    assert root == tmp_path / "cache" / "mnist" / "v1"
    assert (root / "train" / "images.bin").read_bytes() == b"pixels" and (root / "labels.bin").read_bytes() == b"labels"
    fetched = []
    original = s3.download_file
    monkeypatch.setattr(s3, "download_file", lambda *args, **kwargs: fetched.append(args[1]) or original(*args, **kwargs))
    again = local_dataset("mnist", "v1", env=env, s3=s3, mounts=str(tmp_path / "data"), cache=str(tmp_path / "cache"))
    assert again == root and fetched == []  # the same listing: nothing copied
    s3.put_object(Bucket="datasets", Key="datasets/mnist/v1/labels.bin", Body=b"relabelled")
    local_dataset("mnist", "v1", env=env, s3=s3, mounts=str(tmp_path / "data"), cache=str(tmp_path / "cache"))
    assert fetched == ["datasets/mnist/v1/labels.bin"] and (root / "labels.bin").read_bytes() == b"relabelled"


def test_the_ebs_preload_is_used_as_it_is(tmp_path):
    mounted = tmp_path / "data" / "mnist"
    mounted.mkdir(parents=True)
    (mounted / MANIFEST).write_text("")
    env = {"ML_PLATFORM_DATASETS_URI": "s3://datasets/datasets/"}
    assert local_dataset("mnist", "v1", env=env, mounts=str(tmp_path / "data")) == mounted


def test_a_local_datasets_directory_is_used_as_it_is_and_a_missing_one_is_one_line(tmp_path):
    (tmp_path / "mnist" / "v1").mkdir(parents=True)
    env = {"ML_PLATFORM_DATASETS_URI": str(tmp_path)}
    assert local_dataset("mnist", "v1", env=env, mounts=str(tmp_path / "data")) == tmp_path / "mnist" / "v1"
    with pytest.raises(SystemExit, match=r"dataset mnist/v9: .* is not a directory"):
        local_dataset("mnist", "v9", env=env, mounts=str(tmp_path / "data"))
    with pytest.raises(SystemExit, match="no volume at .* and ML_PLATFORM_DATASETS_URI is not set"):
        local_dataset("mnist", "v1", env={}, mounts=str(tmp_path / "data"))
    with pytest.raises(ValueError, match=r"name='../etc': 1-128 letters"):
        local_dataset("../etc", "v1", env=env)


def test_an_empty_prefix_says_so(s3, tmp_path):
    with pytest.raises(SystemExit, match=r"dataset imagenet/v1: nothing under s3://datasets/datasets/imagenet/v1/"):
        local_dataset("imagenet", "v1", env={"ML_PLATFORM_DATASETS_URI": "s3://datasets/datasets/"}, s3=s3,
                      mounts=str(tmp_path / "data"), cache=str(tmp_path / "cache"))
