"""Code that runs in a job, a Lambda function or an operator's shell imports without the CDK (and Node.js)."""

import pkgutil
import subprocess
import sys

import ml_platform_constructs.runtime as runtime


def test_runtime_modules_import_without_aws_cdk():
    modules = [m.name for m in pkgutil.walk_packages(runtime.__path__, "ml_platform_constructs.runtime.")]
    assert {"ml_platform_constructs.runtime.handlers.quality_handler", "ml_platform_constructs.runtime.decisions.stats",
            "ml_platform_constructs.runtime.agents.interruption_watcher"} <= set(modules) and len(modules) >= 17
    code = "; ".join([*(f"import {m}" for m in modules),
                      "import sys", "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'jsii')))"])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_public_names_still_resolve_from_the_package():
    import ml_platform_constructs

    missing = [name for name in ml_platform_constructs.__all__ if not hasattr(ml_platform_constructs, name)]
    assert missing == []
    assert "TrainingQueue" in dir(ml_platform_constructs)
