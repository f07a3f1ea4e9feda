"""Governance: the environment's monthly budget and the guard that stops GPU spend."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct
from ml_platform_constructs import BudgetGuard

from .config import EnvironmentConfig


class GovernanceStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, alerts: sns.ITopic, key: kms.IKey,
                 **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        budget = config.budget
        # One account per environment is budgeted whole from day one; tag filters would count only after the
        # tags are activated for cost allocation (./platform budget activate-tags).
        self.guard = BudgetGuard(
            self, "Budget", monthly_limit=budget.monthly_limit_usd, alerts=alerts, key=key, environment=config.name,
            emails=config.alert_emails, stop_at_percent=budget.stop_at_percent,
            spend_check_every=Duration.minutes(budget.spend_check_minutes), removal_policy=config.removal_policy)
