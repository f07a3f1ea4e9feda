"""What a team runs from its shell, without the CDK or Node.js: ``python -m ml_platform_constructs ...`` (``cli``)
and the training-job commands (``jobs``), with boto3.

The names of 0.3's ``ml_platform_constructs.operations`` module (``main``, ``parser``, ...) are still exported here:
that path became this folder."""

from .._package import lazy_exports

_EXPORTS = {
    "HOW_TO_SIGN_IN": "cli",
    "PROG": "cli",
    "Parser": "cli",
    "Session": "cli",
    "baseline_from_sample": "cli",
    "baseline_key": "cli",
    "budget_status": "cli",
    "main": "cli",
    "one_line_errors": "cli",
    "parser": "cli",
    "read_rows": "cli",
    "resume_budget_stop": "cli",
    "start_dataset_build": "cli",
    "submit_job": "jobs",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
