"""Shared fixtures. jsii synthesis is slow, so each app is synthesized once per session and shared."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Callable

# A deprecated aws-cdk-lib API the library or the app calls fails the synth that first calls it in each process: the
# whole app's synth here (every environment, on every worker) and the synths the tests start (jsii's own switch,
# read by the jsii kernel as it starts, with the first aws_cdk import below; jsii raises on an API's first use in a
# process and lets later uses pass). A user's `cdk synth` would print "[WARNING] ... is deprecated", and the next
# major version would not synthesize.
os.environ["JSII_DEPRECATED"] = "fail"

import botocore.loaders  # noqa: E402
import botocore.session  # noqa: E402
import pytest  # noqa: E402
from aws_cdk import App, Stack  # noqa: E402
from aws_cdk import aws_ec2 as ec2  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from ops import terminal  # noqa: E402
from ops.lint import (CheckovResult, cfn_lint_result, checkov_result, scan_templates, start_cfn_lint,
                      start_checkov)
from ops.lint import templates as assembly_templates
from stacks import config as platform_config
from stacks.app_builder import build

# One botocore loader per data path for the whole test process: each new boto3 Session would otherwise parse its
# services' JSON models again (about ten seconds over the suite); the models never change within a process.
_LOADERS: dict = {}


def _shared_loader(search_path_string=None):
    if search_path_string not in _LOADERS:
        _LOADERS[search_path_string] = botocore.loaders.create_loader(search_path_string)
    return _LOADERS[search_path_string]


botocore.session.create_loader = _shared_loader

ROOT = Path(__file__).resolve().parent.parent
ACCOUNT = "123456789012"
STACKS = [f"{name}/{stack}" for name, env in platform_config.load().environments.items()
          for stack in ("Core", "Data", "Compute", *(("Serving",) if env.endpoints else ()),
                        *(("Governance",) if env.budget else ()))]
CDK_CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
# Under pytest-xdist (./platform test runs the suite on one worker per core, each file whole on one worker) a worker
# learns which files it runs only as it gets them, so work that overlaps a file's tests (the background scans, the
# emulator, the library wheel) starts when that worker reaches the file, not when the session starts: every worker
# collects every test, and each would otherwise start all of it.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# The files that wait on such work go to the workers first, so that it overlaps the rest of the suite, with
# test_local_run.py (one test of about 15 s: by its count of tests it would come last and end the run alone); then the
# others, the most tests first (as xdist's own --loadscope-reorder would).
FIRST_FILES = ("tests/compliance/test_scanners.py", "tests/emulator/test_local_deploy.py",
               "tests/emulator/test_local_run.py", "tests/test_library_wheel.py")


def new_app(outdir: Path, *, validate_templates: bool = False, **context) -> App:
    """An App with the feature flags of cdk.json, as the CLI would run it.

    validate_templates switches aws-cdk-lib's built-in CloudFormation validation (about 2 s a synth);
    the local-target synth of the emulator tests keeps it on.
    """
    return App(outdir=str(outdir), context={**CDK_CONTEXT, **context},
               builtin_cloud_formation_validation=validate_templates)


@pytest.fixture(scope="session")
def config() -> platform_config.PlatformConfig:
    return platform_config.load()


@pytest.fixture(scope="session")
def platform_app(tmp_path_factory, config, request):
    """The whole app (every environment), synthesized once; cdk-nag runs inside this synth. In one process, the
    background scans the selected tests wait for (checkov, cfn-lint) load while it synthesizes and scan its
    templates right away, so that they overlap the rest of the suite; under pytest-xdist, test_scanners.py starts
    them on its worker."""
    if not XDIST_WORKER:
        load_scans(request)
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = new_app(outdir)
    stages = {stage.stage_name: stage for stage in build(app, config)}
    assembly = app.synth()
    if not XDIST_WORKER:
        start_scans(outdir, request)
    return stages, assembly, outdir


@pytest.fixture(scope="module")
def scans_started(request) -> None:
    """Starts the background scans now, unless started, loading while the whole app synthesizes if it has not:
    test_scanners.py asks for it with its first test (under pytest-xdist, the scans start there; in one process, the
    whole app's first synth may have started them). The scans' state lives in this module as pytest loaded it, not in
    ``tests.conftest`` as a test file imports it: two module objects. Nothing when no selected test reads a scan."""
    if not any(scan.get("wanted") for scan in _SCANS):
        return
    load_scans(request)
    _, _, outdir = request.getfixturevalue("platform_app")
    start_scans(outdir, request)


def load_scans(request) -> None:
    """Starts the scans the selected tests wait for (checkov, cfn-lint) without their templates, unless started:
    each loads (checkov's import, cfn-lint's rules: about 4.5 s of CPU together) while the app synthesizes."""
    for scan in _SCANS:
        if scan.get("wanted") and "process" not in scan:
            _launch(scan, request)


def start_scans(outdir: Path, request) -> None:
    """Gives the scans the selected tests wait for the synthesized templates in ``outdir``, starting them unless
    started: they run in the background."""
    for scan in _SCANS:
        if scan.get("wanted"):
            _start_scan(scan, outdir, request)


def _start_scan(scan: dict, outdir: Path, request) -> None:
    if "process" not in scan:
        _launch(scan, request)
    if not scan.get("given"):
        scan_templates(scan["process"], assembly_templates(outdir))
        scan["given"] = True


def _launch(scan: dict, request) -> None:
    if scan is _CHECKOV:
        scan["process"] = start_checkov()
    else:  # cfn-lint, with the rules of every configured Region loaded
        regions = sorted({env.region for env in request.getfixturevalue("config").environments.values()})
        scan["process"] = start_cfn_lint(regions=regions)
    # Ended if never read, with the session, not with the module that asked: in one process the tests that read the
    # scans come last, after that module's first teardown.
    request.session.addfinalizer(lambda: _stop_unread(scan))


def _stop_unread(scan: dict) -> None:
    if "result" not in scan:
        terminal.kill(scan["process"])  # its process group: a worker it forked too
        scan["process"].communicate()


_CHECKOV: dict = {}
_CFN_LINT: dict = {}
_SCANS = (_CHECKOV, _CFN_LINT)


@pytest.fixture(scope="session")
def cfn_lint_scan(platform_app, request) -> dict[str, list[str]]:
    """cfn-lint's errors per synthesized template (the background process started with the whole app's synth, or by
    test_scanners.py's first test; started now if neither did)."""
    if "result" not in _CFN_LINT:
        _start_scan(_CFN_LINT, platform_app[2], request)
        _CFN_LINT["result"] = cfn_lint_result(_CFN_LINT["process"])
    return _CFN_LINT["result"]


@pytest.fixture(scope="session")
def checkov_scan(platform_app, request) -> CheckovResult:
    """checkov's findings over every synthesized template (started as cfn_lint_scan's, or now)."""
    if "result" not in _CHECKOV:
        _start_scan(_CHECKOV, platform_app[2], request)
        _CHECKOV["result"] = checkov_result(_CHECKOV["process"])
    return _CHECKOV["result"]


def pytest_collection_modifyitems(config, items):
    """Tests that wait for the background scans (checkov, cfn-lint) run last, when the scans have had the whole
    suite's time to finish (in one process, the scans start with the first test that needs the whole app). Under
    pytest-xdist, the files in FIRST_FILES come first, and test_scanners.py starts the scans itself."""
    items.sort(key=lambda item: _waits(item, "checkov_scan") or _waits(item, "cfn_lint_scan"))
    if XDIST_WORKER:
        sizes = Counter(_file(item) for item in items)
        first = {name: rank for rank, name in enumerate(FIRST_FILES)}
        items.sort(key=lambda item: (first.get(_file(item), len(first)), -sizes[_file(item)], _file(item)))


def _waits(item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def _file(item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.fixture(scope="session")
def templates(platform_app) -> dict[str, Template]:
    """Template per stack, keyed 'dev/Core', 'prod/Data', ..."""
    stages, _, _ = platform_app
    return {f"{name}/{stack.node.id}": Template.from_stack(stack)
            for name, stage in stages.items()
            for stack in (stage.core, stage.data, stage.compute, stage.serving, stage.governance) if stack is not None}


@pytest.fixture(scope="module")
def synth_stack(tmp_path_factory) -> Callable[[Callable[[Stack], object]], Template]:
    """Builds a one-stack app with the given body (account-bound, us-east-1), synthesizes it, returns its Template."""

    def make(body: Callable[[Stack], object], *, region: str = "us-east-1") -> Template:
        azs = {f"availability-zones:account={ACCOUNT}:region={region}": [f"{region}a", f"{region}b", f"{region}c"]}
        app = new_app(tmp_path_factory.mktemp("unit"), **azs)
        stack = Stack(app, "Test", env={"account": ACCOUNT, "region": region})
        body(stack)
        return Template.from_stack(stack)

    return make


def isolated_vpc(stack: Stack, azs=("us-east-1a", "us-east-1b"), *, endpoints_for=()) -> ec2.Vpc:
    """A VPC with isolated subnets only, as the platform's default network creates, with the VPC endpoints the
    constructs named in ``endpoints_for`` need there (``ENDPOINTS_WITHOUT_EGRESS``) and Session Manager's; none by
    default."""
    from ml_platform_constructs.foundation.network import ENDPOINTS_WITHOUT_EGRESS, SESSION_MANAGER_ENDPOINTS

    vpc = ec2.Vpc(stack, "Vpc", availability_zones=list(azs), nat_gateways=0, restrict_default_security_group=False,
                  subnet_configuration=[ec2.SubnetConfiguration(name="c", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])
    names = sorted({name for construct in endpoints_for for name in ENDPOINTS_WITHOUT_EGRESS[construct]}
                   | (set(SESSION_MANAGER_ENDPOINTS) if endpoints_for else set()))
    for name in names:
        if name == "s3":
            vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        else:
            vpc.add_interface_endpoint(name.replace(".", "-"), service=ec2.InterfaceVpcEndpointAwsService(name))
    return vpc


def queue_vpc(stack: Stack) -> ec2.Vpc:
    """An isolated VPC with the interface endpoints a TrainingQueue's instances need without a NAT gateway."""
    from ml_platform_constructs import QUEUE_INTERFACE_ENDPOINTS

    vpc = isolated_vpc(stack)
    for service in (*QUEUE_INTERFACE_ENDPOINTS, ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
                    ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING):
        vpc.add_interface_endpoint(service.short_name.replace(".", "-"), service=service)
    vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)  # image layers come from S3
    return vpc


def training_queue(stack: Stack, **props):
    """A TrainingQueue with what every queue needs: an isolated VPC with the queue's endpoints, an alert topic, a
    key, an ECR image and four GPU types of one shape; ``props`` add to them."""
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sns as sns

    from ml_platform_constructs import TrainingQueue

    return TrainingQueue(stack, "Queue", vpc=queue_vpc(stack), alerts=sns.Topic(stack, "Alerts"),
                         key=kms.Key(stack, "Key"), image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
                         instance_types=[ec2.InstanceType(t) for t in ("g5.xlarge", "g5.2xlarge", "g6.xlarge",
                                                                       "g6.2xlarge")], **props)


def freeze_what_lives():
    """Collects the garbage once, then moves every object left to the collector's permanent generation
    (gc.freeze): the imported modules (aws-cdk-lib's, MLflow's, moto's) and the session's fixtures are never garbage,
    yet every full collection (tens a worker) walked them all, and pytest's five at its end: about 8 s of each
    worker's CPU over the suite (measured with gc.callbacks, docs/BENCHMARKS.md). Objects freed by their count still
    go at once; what a test makes is collected as before, and frozen only with its file's end."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """After a file's last test (its module fixtures torn down, its fixture values released), what the file imported
    and kept is frozen too; not after a failed test, whose traceback (sys.last_value) still holds its objects: their
    finalizers must run, and report, at the session's end."""
    try:
        return (yield)
    finally:
        if (nextitem is None or nextitem.path != item.path) and getattr(sys, "last_value", None) is None:
            freeze_what_lives()


def pytest_collection_finish(session):
    """Starts the library wheel build and synth (a separate process, seconds of CPU) as soon as the session knows
    it will run test_library_wheel.py, so it overlaps the other tests (under pytest-xdist, the file starts it)."""
    if not XDIST_WORKER and any(item.path.name == "test_library_wheel.py" for item in session.items):
        from tests import test_library_wheel

        work = Path(tempfile.mkdtemp(prefix="library-wheel-"))
        session.config.library_wheel_build = (work, test_library_wheel.start(work))
    # Which scans the selected tests read: known here, after -k, -m, --deselect and --lf have removed theirs (this
    # module's pytest_collection_modifyitems runs before pytest's own deselection).
    _CHECKOV["wanted"] = any(_waits(item, "checkov_scan") for item in session.items)
    _CFN_LINT["wanted"] = any(_waits(item, "cfn_lint_scan") for item in session.items)
    freeze_what_lives()  # every test module imported


def pytest_sessionfinish(session):
    started = getattr(session.config, "library_wheel_build", None)
    if started:
        work, process = started
        if process.poll() is None:  # the session stopped before the test waited for it
            terminal.kill(process)  # its process group: the example's synth it started too
            process.communicate()  # its pipes read and closed
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def _mlflow_store_template(tmp_path_factory, pytestconfig) -> Path:
    """A local MLflow SQLite store, empty, with its tables: each test gets a copy. Creating the tables runs every
    schema migration (about 4 s of CPU), so the store is kept, per installed MLflow, SQLAlchemy and Alembic, and
    made again when one changes or the kept file is not a whole store: in the virtual environment that runs the tests
    (``<sys.prefix>/cache``: ``.venv/cache`` under ./platform), so that a run without pytest's cache (``-p
    no:cacheprovider``, as the bench runs each file alone) finds it too; else (outside a virtual environment, or
    where it cannot be written) in pytest's cache directory; where neither can be written, made for the session."""
    pytest.importorskip("mlflow")
    import alembic
    import mlflow
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    versions = "-".join(module.__version__ for module in (mlflow, sqlalchemy, alembic))
    cache = getattr(pytestconfig, "cache", None)  # None under -p no:cacheprovider
    name = f"mlflow-store-{versions}"
    places = [Path(sys.prefix) / "cache" / name] if sys.prefix != sys.base_prefix else []
    if cache:
        with contextlib.suppress(OSError):  # a read-only checkout
            places.append(cache.mkdir(name))
    for directory in places:
        if _migrated(directory / "mlflow.db"):
            return directory / "mlflow.db"
    making = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{making}").search_experiments()
    for directory in places:
        part = directory / f".{os.getpid()}.db"
        try:  # under a name of its own, then renamed: pytest-xdist's workers may make it at once
            directory.mkdir(parents=True, exist_ok=True)
            shutil.copy(making, part)
            os.replace(part, directory / "mlflow.db")
            break
        except OSError:  # not writable: the next place, or made for this session only
            pass
        finally:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
    return making


def _migrated(store: Path) -> bool:
    """Whether a kept store is whole: SQLite's, with MLflow's migrations recorded (a truncated or foreign file is made
    again)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            return bool(connection.execute("SELECT version_num FROM alembic_version").fetchone())
    except sqlite3.Error:
        return False


@pytest.fixture
def mlflow_store(_mlflow_store_template, tmp_path) -> str:
    """The tracking URI of a fresh local MLflow store (SQLite, artifacts beside it) under tmp_path."""
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(_mlflow_store_template, store / "mlflow.db")
    return f"sqlite:///{store / 'mlflow.db'}"
