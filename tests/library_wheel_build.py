"""Builds the construct library's wheel, installs it where the platform app is not, and synthesizes
examples/team_stack with it; run by tests/test_library_wheel.py (in the background from the start of the session,
see conftest.pytest_collection_finish, since it is a separate process).

  python tests/library_wheel_build.py WORKDIR    -> WORKDIR/result.json, WORKDIR/cdk.out

Nothing is downloaded: the wheel is built by setuptools' PEP 517 hook (what pip runs, without its start-up cost)
from a copy of constructs/, installed by unpacking it (a pure-Python wheel: what an installer does for purelib),
and the example's interpreter (the base Python, not the venv) sees the already installed aws-cdk-lib,
constructs and cdk-nag through PYTHONPATH, where .pth files (the editable install's finder) are not processed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "team_stack"
LIBRARY = ROOT / "constructs"

PROBE = """
import importlib.util, json, runpy
import ml_platform_constructs
found = {name: importlib.util.find_spec(name) is not None for name in ("stacks", "ops", "tests")}
print("PROBE " + json.dumps({"library": ml_platform_constructs.__file__, "app_modules": found}))
runpy.run_path("app.py", run_name="__main__")
"""


def main(work: Path) -> int:
    source = work / "constructs"
    shutil.copytree(LIBRARY, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])",
                    str(work)], cwd=source, check=True, capture_output=True, text=True)
    wheel = next(work.glob("ml_platform_constructs-*.whl"))
    site = work / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    app = work / "app"
    app.mkdir()
    for name in ("app.py", "team_stack.py", "cdk.json"):
        shutil.copy(EXAMPLE / name, app / name)
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # node for jsii
        "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]]),
        "PYTHONNOUSERSITE": "1",
        "CDK_OUTDIR": str(work / "cdk.out"),
        # The context of the example's cdk.json (cdk init's feature flags), handed over as the CDK CLI does.
        "CDK_CONTEXT_JSON": json.dumps(json.loads((EXAMPLE / "cdk.json").read_text())["context"]),
        # aws-cdk-lib's built-in template validation off, as in the other tests' synths (conftest.new_app): then
        # the validation report is written only because the example registered a plugin, cdk-nag.
        "CDK_VALIDATION": "false",
        "HOME": os.environ.get("HOME", str(work)),
    }
    base_python = getattr(sys, "_base_executable", sys.executable)
    result = subprocess.run([base_python, "-s", "-c", PROBE], cwd=app, env=env, capture_output=True, text=True,
                            timeout=240)
    probe = re.search(r"^PROBE (.*)$", result.stdout, re.M)
    (work / "result.json").write_text(json.dumps({
        "returncode": result.returncode, "stderr": result.stderr[-3000:], "wheel": str(wheel), "site": str(site),
        "probe": json.loads(probe.group(1)) if probe else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
