"""Sets a GPU fleet's Auto Scaling group to 0 instances, once, when its scale-to-zero alarm changes to ALARM.

Invoked by an EventBridge rule on the alarm's state-change event, which comes once per change (an Auto Scaling
alarm action would repeat every minute while the alarm stays in ALARM and undo an operator's scale-up).
"""

from __future__ import annotations

import os

import boto3


def handler(event: dict, context: object, autoscaling=None) -> dict:
    state = event.get("detail", {}).get("state", {}).get("value")
    if state != "ALARM":
        return {"changed": False, "state": state}
    group = os.environ["GROUP_NAME"]
    (autoscaling or boto3.client("autoscaling")).set_desired_capacity(
        AutoScalingGroupName=group, DesiredCapacity=0, HonorCooldown=False)
    print(f"{group}: desired capacity set to 0 (GPUs idle and no job running)")
    return {"changed": True, "group": group}
