"""The fleet's scale-to-zero function through its Lambda entry point as Lambda runs it: its own Auto Scaling client,
what it returns and logs (mutation survivors of the fleet tests)."""

import boto3

from ml_platform_constructs.runtime.handlers import scale_to_zero


class AutoScaling:
    def __init__(self):
        self.calls = []

    def set_desired_capacity(self, **kwargs):
        self.calls.append(kwargs)


def test_on_alarm_it_makes_its_client_sets_the_group_to_zero_and_says_so(monkeypatch, capsys):
    client, asked = AutoScaling(), []
    monkeypatch.setattr(boto3, "client", lambda service: asked.append(service) or client)
    monkeypatch.setenv("GROUP_NAME", "dev-Compute-trainingASG")
    assert scale_to_zero.handler({"detail": {"state": {"value": "ALARM"}}}, None) == {
        "changed": True, "group": "dev-Compute-trainingASG"}
    assert asked == ["autoscaling"]
    assert client.calls == [{"AutoScalingGroupName": "dev-Compute-trainingASG", "DesiredCapacity": 0,
                             "HonorCooldown": False}]
    assert capsys.readouterr().out == "dev-Compute-trainingASG: desired capacity set to 0 (GPUs idle and no job running)\n"


def test_any_other_state_changes_nothing_and_says_which(monkeypatch):
    monkeypatch.setattr(boto3, "client", lambda service: AutoScaling())
    assert scale_to_zero.handler({"detail": {"state": {"value": "INSUFFICIENT_DATA"}}}, None) == {
        "changed": False, "state": "INSUFFICIENT_DATA"}
    assert scale_to_zero.handler({}, None) == {"changed": False, "state": None}
