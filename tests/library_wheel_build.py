"""Builds the construct library's wheel and the job side's (``ml-platform-job``, which it requires), installs both
where the platform app is not, and synthesizes examples/team_stack with them; then runs the operations CLI in a
virtual environment that has only the two wheels and boto3, without Node.js on PATH, and the job side's CLI in one
that has only its own wheel and boto3 (what a training image installs). Run by tests/test_library_wheel.py (in the background from the start of the
session, see conftest.pytest_collection_finish, since it is a separate process).

  python tests/library_wheel_build.py WORKDIR    -> WORKDIR/result.json, WORKDIR/cdk.out

Nothing is downloaded: the wheel is built by setuptools' PEP 517 hook (what pip runs, without its start-up cost)
from a copy of constructs/, installed by unpacking it (a pure-Python wheel: what an installer does for purelib),
and the example's interpreter (the base Python, not the venv) sees the already installed aws-cdk-lib,
constructs and cdk-nag through PYTHONPATH, where .pth files (the editable install's finder) are not processed.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "team_stack"
LIBRARY = ROOT / "constructs"
JOB_SIDE = ROOT / "job"

PROBE = """
import importlib.util, json, runpy
import ml_platform_constructs
found = {name: importlib.util.find_spec(name) is not None for name in ("stacks", "ops", "tests")}
print("PROBE " + json.dumps({"library": ml_platform_constructs.__file__, "app_modules": found}))
runpy.run_path("app.py", run_name="__main__")
"""


def main(work: Path) -> int:
    wheel, job_wheel = build_wheel(LIBRARY, work), build_wheel(JOB_SIDE, work)
    site = work / "site"
    for built in (wheel, job_wheel):
        with zipfile.ZipFile(built) as archive:
            archive.extractall(site)
    app = work / "app"
    app.mkdir()
    for path in [*EXAMPLE.glob("*.py"), EXAMPLE / "cdk.json"]:
        shutil.copy(path, app / path.name)
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
        # The suite's (tests/conftest.py: "fail"): the example's synth through the wheel calls no deprecated API.
        "JSII_DEPRECATED": os.environ.get("JSII_DEPRECATED", "fail"),
        "HOME": os.environ.get("HOME", str(work)),
    }
    base_python = getattr(sys, "_base_executable", sys.executable)
    result = subprocess.run([base_python, "-s", "-c", PROBE], cwd=app, env=env, capture_output=True, text=True,
                            timeout=240)
    probe = re.search(r"^PROBE (.*)$", result.stdout, re.M)
    (work / "result.json").write_text(json.dumps({
        "returncode": result.returncode, "stderr": result.stderr[-3000:], "wheel": str(wheel), "site": str(site),
        "probe": json.loads(probe.group(1)) if probe else None, "cli": operations_cli(work, [wheel, job_wheel]),
        "job_wheel": str(job_wheel), "job_cli": job_side_cli(work, job_wheel)}))
    return 0


def build_wheel(project: Path, work: Path) -> Path:
    """The project's wheel (setuptools' PEP 517 hook, from a copy of its folder) in ``work``."""
    source = work / project.name
    shutil.copytree(project, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    before = set(work.glob("*.whl"))
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])",
                    str(work)], cwd=source, check=True, capture_output=True, text=True)
    return next(iter(set(work.glob("*.whl")) - before))


def requirements_closure(name: str) -> set[str]:
    """``name`` and every distribution it requires (environment markers of optional extras skipped)."""
    found, todo = set(), [name]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in found:
            continue
        found.add(dist.metadata["Name"].lower())
        for requirement in dist.requires or []:
            if "extra ==" not in requirement:
                todo.append(re.split(r"[ ;<>=!~\[(]", requirement, 1)[0])
    return found


def boto3_venv(work: Path, name: str, wheels: list[Path]) -> Callable[..., dict]:
    """A venv with ``wheels`` and boto3 (and boto3's requirements) only, on a PATH without Node.js; returns a function
    that runs its Python with arguments."""
    venv = work / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    for dist_name in requirements_closure("boto3"):  # linked from this environment: nothing is downloaded
        dist = importlib.metadata.distribution(dist_name)
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if not (site / top).exists() and (Path(dist.locate_file(top))).exists():
                (site / top).symlink_to(Path(dist.locate_file(top)))
    env = {"PATH": str(venv / "bin"), "HOME": str(work), "AWS_CONFIG_FILE": "/nonexistent",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true", "PYTHONNOUSERSITE": "1"}

    def run(*args: str) -> dict:
        done = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=120, cwd=work)
        return {"returncode": done.returncode, "stdout": done.stdout[-2000:], "stderr": done.stderr[-2000:]}

    return run


JOB_PROBE = """
import importlib, json, pkgutil, sys
import ml_platform_job
skipped = {"data", "job", "transformers", "lightning"}  # torch and the frameworks: the job's own install
names = [m.name for m in pkgutil.iter_modules(ml_platform_job.__path__) if m.name not in skipped and m.name != "__main__"]
for name in names:
    importlib.import_module("ml_platform_job." + name)
print(json.dumps({"modules": sorted(names), "loaded": sorted({m.split(".")[0] for m in sys.modules}
                  & {"aws_cdk", "jsii", "constructs", "ml_platform_constructs", "torch"})}))
"""


def job_side_cli(work: Path, wheel: Path) -> dict:
    """The job side as a training image installs it: its wheel and boto3 only. Every module that needs no framework
    imports, nothing of the CDK comes with it, and its CLI answers."""
    run = boto3_venv(work, "job-venv", [wheel])
    return {"probe": run("-c", JOB_PROBE), "help": run("-m", "ml_platform_job", "rehearse", "--help"),
            "no_command": run("-m", "ml_platform_job", "rehearse"),
            "cdk": run("-c", "import aws_cdk"), "constructs": run("-c", "import ml_platform_constructs")}


def operations_cli(work: Path, wheels: list[Path]) -> dict:
    """``python -m ml_platform_constructs`` in a venv with the wheels and boto3 (and boto3's requirements) only, on a
    PATH without Node.js: --help, an import check, and an error that must be one line."""
    run = boto3_venv(work, "cli-venv", wheels)
    env = {"PATH": str(work / "cli-venv" / "bin")}

    return {"node_on_path": shutil.which("node", path=env["PATH"]) is not None,
            "help": run("-m", "ml_platform_constructs", "--help"),
            "cdk": run("-c", "import aws_cdk"),
            "modules": run("-c", "import sys, ml_platform_constructs.advice, ml_platform_constructs.operations; "
                                 "from ml_platform_constructs.advice import PRESETS, advise, queue_block; "
                                 "from ml_platform_constructs.operations import cli, jobs; cli.parser(); "
                                 "block = queue_block(advise(PRESETS['resnet50-imagenet'], target='queue'), 'dev'); "
                                 "print(next(line for line in block.splitlines() if not line.startswith('#'))); "
                                 "print(sorted({m.split('.')[0] for m in sys.modules} & {'aws_cdk', 'jsii'}))"),
            "no_region": run("-m", "ml_platform_constructs", "budget", "status")}


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
