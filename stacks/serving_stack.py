"""Serving: the environment's SageMaker endpoints, each with data capture, drift checks and alarms."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct
from ml_platform_constructs import (DatasetBucket, EndpointAutoScaling, FeatureWatch, ModelQuality, MonitoredEndpoint,
                                    RetrainOnDrift, TrainingQueue)

from .config import EndpointConfig, EnvironmentConfig


def serving_quality(endpoint: EndpointConfig) -> dict[str, Any]:
    """MonitoredEndpoint's scaling (target tracking, the latency scale-out at the p99 alarm's threshold and the scale-in
    that agrees with both), quality and feature-watch props."""
    quality, watch = endpoint.quality, endpoint.feature_watch
    return {
        "p99_latency_threshold": Duration.millis(endpoint.p99_latency_ms),
        "auto_scaling": EndpointAutoScaling(
            max_capacity=endpoint.max_instances, invocations_per_instance=endpoint.invocations_per_instance,
            concurrent_requests_per_model=endpoint.concurrent_requests_per_model,
            scale_out_on_latency=endpoint.scale_out_on_latency,
            latency_scale_out_cooldown=Duration.minutes(endpoint.latency_scale_out_cooldown_minutes))
        if endpoint.max_instances > 1 else None,
        "quality": ModelQuality(
            problem_type=quality.problem_type, baseline=quality.baseline, baseline_examples=quality.baseline_examples,
            prediction_path=quality.prediction_path, probability_threshold=quality.probability_threshold,
            min_labelled=quality.min_labelled, max_drop=quality.max_drop_points,
            false_alarms_per_90_days=quality.false_alarms_per_90_days, power=quality.power,
            max_batch_hours=quality.max_batch_hours, reference_labels=quality.reference_labels,
            schedule=Duration.hours(quality.schedule_hours),
            label_lateness=Duration.hours(quality.label_lateness_hours)) if quality else None,
        "feature_watch": FeatureWatch(std_ratio_low=watch.std_ratio_low, std_ratio_high=watch.std_ratio_high,
                                      explained_variance_drop=watch.explained_variance_drop_points),
    }


class ServingStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, vpc: ec2.IVpc,
                 subnets: ec2.SubnetSelection, alerts: sns.ITopic, key: kms.IKey, datasets: DatasetBucket,
                 queues: dict[str, TrainingQueue], **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        self.endpoints = {
            endpoint.name: MonitoredEndpoint(
                self, endpoint.name,
                endpoint_name=f"{config.project}-{config.name}-{endpoint.name}",
                image_uri=endpoint.image_uri, model_data_bucket=datasets.bucket, model_data_key=endpoint.model_data_key,
                instance_type=endpoint.instance_type, alerts=alerts, baseline_bucket=datasets,
                vpc=vpc, vpc_subnets=subnets, capture_key=key, logs_key=key,
                volume_key=key if MonitoredEndpoint.accepts_volume_key(endpoint.instance_type) else None,
                sampling_percentage=endpoint.sampling_percentage, **serving_quality(endpoint),
                model_version=endpoint.model_version, removal_policy=config.removal_policy,
                budget_scope=config.name)
            for endpoint in config.endpoints
        }
        for endpoint in config.endpoints:
            if endpoint.retrain is None:
                continue
            retrain = endpoint.retrain
            # The retraining job definition lives here, with what submits it: nothing this stack imports from
            # Compute changes when the retraining image does.
            retraining = RetrainOnDrift(
                self, f"{endpoint.name}Retrain", alarm=self.endpoints[endpoint.name].alarms["drift"],
                queue=queues[retrain.queue], image_uri=retrain.image, command=retrain.command,
                job_name_prefix=f"retrain-{endpoint.name}", alerts=alerts,
                cooldown=Duration.hours(retrain.cooldown_hours), removal_policy=config.removal_policy)
            if endpoint.quality is not None:  # the same single-flight retraining, with the quality trigger's cooldown
                retraining.add_trigger("quality", self.endpoints[endpoint.name].alarms["quality"],
                                       cooldown=Duration.hours(endpoint.quality.retrain_cooldown_hours))
