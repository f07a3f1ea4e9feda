"""The team's CDK app: its stack bound to its account, AZs pinned (no lookup at synth), cdk-nag on every synth."""

import json
import sys
from pathlib import Path

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks
from ml_platform_constructs import PlatformNetwork

from team_stack import AVAILABILITY_ZONES, TeamStack

ACCOUNT, REGION = "111122223333", "us-east-1"

app = App(context=PlatformNetwork.availability_zone_context(
    account=ACCOUNT, region=REGION, availability_zones=AVAILABILITY_ZONES))
TeamStack(app, "TeamA", env=Environment(account=ACCOUNT, region=REGION))
Validations.of(app).add_plugins(AwsSolutionsChecks(app))
assembly = app.synth()

# Under the CDK CLI a failed check does not fail the synth by itself: fail on cdk-nag's errors in the validation
# report (which also lists warnings, and with cdk init's flags every construct annotation: those do not fail).
report = Path(assembly.directory) / "validation-report.json"
plugins = json.loads(report.read_text())["pluginReports"] if report.exists() else []
errors = sorted({violation["ruleName"] for plugin in plugins for violation in plugin["violations"]
                 if violation["ruleName"].startswith("AwsSolutions-") and violation["severity"] == "error"})
if errors:
    sys.exit(f"cdk-nag errors {', '.join(errors)}: see {report}")
