"""The job side is a distribution of its own (issue 35): nothing in it imports the construct library or the CDK, its
instance shapes are the GPU catalog's, and the construct library's 0.6 import paths still work for one release, with a
warning naming the new path."""

import ast
import importlib
import sys
from pathlib import Path

import pytest

from ml_platform_constructs._package import REMOVED_JOB_SIDE_PATHS
from ml_platform_constructs.advice.gpu_catalog import GPU_CATALOG
from ml_platform_job.instances import INSTANCE_SHAPES

JOB_SIDE = Path(__file__).resolve().parents[2] / "job" / "ml_platform_job"
FRAMEWORKS = {"torch", "numpy", "transformers", "lightning"}


def imported(path: Path, at_load: bool = False) -> set[str]:
    """The top-level packages a module imports (``at_load``: only where it is loaded, not inside its functions)."""
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree)
    if at_load:
        nodes = [n for top in tree.body if not isinstance(top, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(top)]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_module_of_the_job_side_imports_the_cdk_or_the_construct_library():
    for path in sorted(JOB_SIDE.glob("*.py")):
        assert not imported(path) & {"aws_cdk", "constructs", "jsii", "cdk_nag", "ml_platform_constructs"}, path.name


def test_only_the_framework_modules_import_a_framework_at_load():
    """The rest imports with the standard library and boto3 (a training image's minimum, and the budget guard's
    function, which ships prices.py)."""
    heavy = {path.name for path in JOB_SIDE.glob("*.py") if imported(path, at_load=True) & FRAMEWORKS}
    assert heavy == {"data.py", "transformers.py", "lightning.py"}


def test_the_instance_shapes_are_the_gpu_catalogs():
    assert {name: (e.gpu_count, e.vcpus, e.memory_gib, e.gpu_model) for name, e in GPU_CATALOG.items()} == {
        name: (s.gpus, s.vcpus, s.memory_gib, s.gpu) for name, s in INSTANCE_SHAPES.items()}


@pytest.mark.parametrize("old", sorted(REMOVED_JOB_SIDE_PATHS))
def test_the_old_path_was_removed_in_0_9_and_its_error_names_the_new_one(old):
    name = f"ml_platform_constructs.{old}"
    sys.modules.pop(name, None)
    with pytest.raises(ModuleNotFoundError) as error:
        importlib.import_module(name)
    new = f"ml_platform_job.{REMOVED_JOB_SIDE_PATHS[old]}"
    assert str(error.value) == (f"{name} moved to {new} in 0.7.0 and its old path was removed in 0.9.0: import {new} "
                                "(pip install ml-platform-job)")
    importlib.import_module(new)
