"""Sets a GPU fleet's Auto Scaling group to 0 instances, once, when its scale-to-zero alarm changes to ALARM.

Invoked as the alarm's Lambda action, which runs on the state change only (an Auto Scaling action would
repeat every minute while the alarm stays in ALARM and undo an operator's scale-up).
"""

from __future__ import annotations

import os

import boto3


def handler(event: dict, context: object, autoscaling=None) -> dict:
    state = event.get("alarmData", {}).get("state", {}).get("value")
    if state != "ALARM":
        return {"changed": False, "state": state}
    group = os.environ["GROUP_NAME"]
    (autoscaling or boto3.client("autoscaling")).set_desired_capacity(
        AutoScalingGroupName=group, DesiredCapacity=0, HonorCooldown=False)
    print(f"{group}: desired capacity set to 0 (GPUs idle and no job running)")
    return {"changed": True, "group": group}
