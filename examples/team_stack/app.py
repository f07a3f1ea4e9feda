"""The team's CDK app: a data stack and a training stack in eu-west-1, bound to the team's account with the AZs pinned
(no lookup at synth), cdk-nag on every synth."""

import json
import sys
from pathlib import Path

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks
from ml_platform_constructs import availability_zone_context

from data_stack import DataStack
from training_stack import TrainingStack

ACCOUNT, REGION = "111122223333", "eu-west-1"

# Any ec2.Vpc in an account-bound stack reads the Region's AZs: pinned here, CDK never looks them up at synth.
app = App(context=availability_zone_context(account=ACCOUNT, region=REGION,
                                            availability_zones=["eu-west-1a", "eu-west-1b"]))
environment = Environment(account=ACCOUNT, region=REGION)
data = DataStack(app, "TeamBData", env=environment)
TrainingStack(app, "TeamBTraining", data=data, env=environment)
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
