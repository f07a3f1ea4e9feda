"""The synth floor: one empty stack, with the same validation (cdk-nag, built-in checks) as the real app."""

from aws_cdk import App, Stack, Validations
from cdk_nag import AwsSolutionsChecks

app = App()
Stack(app, "Empty")
Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
