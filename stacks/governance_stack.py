"""Governance: the environment's monthly budget and the guard that stops GPU spend."""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, Duration, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct
from ml_platform_constructs import BudgetGuard

from .config import EnvironmentConfig


class GovernanceStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, alerts: sns.ITopic, key: kms.IKey,
                 emulator: bool = False, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        budget = config.budget
        # One account per environment is budgeted whole from day one; tag filters would count only after the
        # tags are activated for cost allocation (./platform budget activate-tags).
        self.guard = BudgetGuard(
            self, "Budget", monthly_limit=budget.monthly_limit_usd,
            # CloudFormation names the budget, so notification changes deploy; moto creates no budget and fails
            # on a Ref to one, so the emulator's gets a fixed name (the warning about it is expected there).
            budget_name=f"{config.project}-{config.name}-monthly" if emulator else None, alerts=alerts, key=key,
            environment=config.name, budget_scope=config.name,
            emails=config.alert_emails, stop_at_percent=budget.stop_at_percent,
            spend_check_every=Duration.minutes(budget.spend_check_minutes), removal_policy=config.removal_policy)
        if emulator:
            Annotations.of(self).acknowledge_warning("ml-platform:budget-name",
                                                     "the emulator cannot resolve a generated budget name")
