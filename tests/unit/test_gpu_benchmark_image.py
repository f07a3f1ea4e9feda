"""A GPU benchmark image needs Python, PyTorch, boto3 and the job side's wheel (ml-platform-job) only (docs/TRAINING.md,
"A GPU benchmark image"): examples/gpu_benchmark.py imports nothing from aws-cdk-lib, jsii, constructs or the
construct library."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for torch (not a dependency of the platform) and an import hook that refuses the CDK's packages.
PROBE = """
import importlib.abc, runpy, sys, types

class RefuseTheCdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("aws_cdk", "jsii", "constructs", "cdk_nag", "ml_platform_constructs"):
            raise ImportError(f"the benchmark imported {name}")

sys.meta_path.insert(0, RefuseTheCdk())
for name in ("torch", "torch.nn", "torch.utils", "torch.utils.checkpoint"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["torch"].nn = sys.modules["torch.nn"]
sys.modules["torch.utils.checkpoint"].checkpoint = lambda *args, **kwargs: None
script = runpy.run_path(sys.argv[1], run_name="benchmark")
print(sorted(script["WORKLOADS"]))
"""


def test_the_benchmark_script_loads_without_the_cdk():
    result = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "examples" / "gpu_benchmark.py")],
                            capture_output=True, text=True, cwd=ROOT / "examples")
    assert result.returncode == 0, result.stderr
    assert "resnet50-imagenet" in result.stdout


def test_the_probe_refuses_a_cdk_import():
    result = subprocess.run([sys.executable, "-c", PROBE.replace("runpy.run_path(sys.argv[1]", "__import__('jsii') or "
                                                                 "runpy.run_path(sys.argv[1]"),
                             str(ROOT / "examples" / "gpu_benchmark.py")], capture_output=True, text=True)
    assert "the benchmark imported jsii" in result.stderr
