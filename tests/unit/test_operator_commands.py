"""Every operator command: help before any work, usage lines with the command as typed, one-line errors, unknown
environments named with the known ones, and no AWS call before the credential and account check."""

import re
import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from ops import aws_access, budget, cost_estimate, dataset, drift_baseline, fleet, job, labels, model, quality, runs
from tests.unit.test_aws_access import no_credentials

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"
UNKNOWN = r"^error: unknown environment 'nosuch': config/environments.toml declares dev, staging, prod$"

COMMANDS = {  # module, its usage line's start, the command's arguments with an unknown environment
    "fleet": (fleet, "usage: ./platform fleet ", ["status", "nosuch"]),
    "job": (job, "usage: ./platform job [-h] {submit,list,show,logs,cancel,cost,rehearse}", ["list", "nosuch"]),
    "job submit": (job, "usage: ./platform job submit ENV QUEUE --image IMAGE --name NAME",
                   ["submit", "nosuch", "training", "--image", IMAGE, "--name", "a", "--", "python", "t.py"]),
    "job cost": (job, "usage: ./platform job cost ", ["cost", "nosuch", "job-1"]),
    "dataset": (dataset, "usage: ./platform dataset ", ["list", "nosuch"]),
    "drift-baseline": (drift_baseline, "usage: ./platform drift-baseline ", ["nosuch", "classifier", "sample.csv"]),
    "budget": (budget, "usage: ./platform budget ", ["status", "nosuch"]),
    "budget activate-tags": (budget, "usage: ./platform budget ", ["activate-tags", "nosuch"]),
    "cost": (cost_estimate, "usage: ./platform cost ", ["nosuch"]),
    "runs": (runs, "usage: ./platform runs ", ["list", "nosuch"]),
    "model": (model, "usage: ./platform model ", ["status", "nosuch", "classifier"]),
    "labels": (labels, "usage: ./platform labels ", ["upload", "nosuch", "classifier", "labels.jsonl"]),
    "quality": (quality, "usage: ./platform quality ",
                ["check", "nosuch", "classifier", "--capture", "capture", "--labels", "labels.jsonl"]),
}


@pytest.fixture
def no_aws(monkeypatch):
    """Any credential check or AWS session fails the test: the command had to end before it."""
    def called(*args, **kwargs):
        raise AssertionError("an AWS session was asked for")
    for module in (fleet, job, dataset, drift_baseline, budget, model, labels):
        for name in ("session_for", "payer_session"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, called)
    monkeypatch.setattr(aws_access, "session_for", called)
    monkeypatch.setattr(cost_estimate, "synth", called)


def run(module, argv):
    if module is job:
        return job.main(argv, session_factory=lambda env: pytest.fail("AWS was called"))
    return module.main(argv)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_names_the_command_as_typed_and_does_no_work(name, capsys, no_aws):
    module, usage, _ = COMMANDS[name]
    words = name.split()[1:]
    with pytest.raises(SystemExit) as done:
        module.main([*(words if words != ["activate-tags"] else []), "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(usage)


@pytest.mark.parametrize("name", COMMANDS)
def test_an_unknown_environment_is_one_line_naming_the_known_ones_before_any_aws_call(name, no_aws):
    module, _, argv = COMMANDS[name]
    with pytest.raises(SystemExit, match=UNKNOWN):
        run(module, argv)


@pytest.mark.parametrize("module,argv,message", [
    (fleet, ["scale", "dev"], "error: ./platform fleet scale: the following arguments are required: FLEET, N "
                              "(usage: ./platform fleet scale --help)"),
    (job, ["logs", "dev"], "error: ./platform job logs: the following arguments are required: job_id "
                           "(usage: ./platform job logs --help)"),
    (job, ["list", "dev", "training", "extra"], "error: ./platform job: unrecognized arguments: extra "
                                                "(usage: ./platform job --help)"),
    (budget, ["what-if", "dev", "--actual", "lots"], "error: ./platform budget: argument --actual: 'lots' is not a "
                                                     "number: Budgets' actual spend this month in USD, from 0 to "
                                                     "10,000,000 (e.g. --actual 1200) (usage: ./platform budget --help)"),
    (cost_estimate, ["--utilization", "2"], "error: ./platform cost: argument --utilization: 2 is out of range: the "
                                            "share of the month GPU fleets and queues run at max size, from 0 to 1 "
                                            "(e.g. --utilization 0.25) (usage: ./platform cost --help)"),
    (cost_estimate, ["dev", "--storage-gb", "-5"], "error: ./platform cost: argument --storage-gb: -5 is out of "
                                                   "range: GB in the dataset bucket, from 0 to 10,000,000 (e.g. "
                                                   "--storage-gb 1000) (usage: ./platform cost --help)"),
    (labels, ["upload", "dev"], "error: ./platform labels upload: the following arguments are required: endpoint, "
                                "file (usage: ./platform labels upload --help)"),
    (quality, ["check", "dev", "classifier", "--capture", "c"], "error: ./platform quality check: the following "
                                                               "arguments are required: --labels (usage: ./platform "
                                                               "quality check --help)"),
])
def test_a_bad_argument_is_one_line_naming_the_command_and_its_help(module, argv, message, capsys, no_aws):
    with pytest.raises(SystemExit) as done:
        module.main(argv)
    assert done.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_cost_refuses_its_arguments_before_it_synthesizes(no_aws, capsys):
    with pytest.raises(SystemExit):  # the synth stub would fail the test with an AssertionError instead
        cost_estimate.main(["--synth", "--utilization", "2"])
    with pytest.raises(SystemExit, match=UNKNOWN):
        cost_estimate.main(["--synth", "nosuch"])


def test_job_submit_with_its_command_before_the_separator_says_where_the_command_goes(no_aws):
    with pytest.raises(SystemExit, match=r"^error: 'python train.py --epochs 3': the job's command goes after --, "
                                         r"e.g. ./platform job submit dev training --image IMAGE --name NAME -- "
                                         r"python train.py --epochs 3$"):
        job.main(["submit", "dev", "training", "--image", IMAGE, "--name", "r1", "python", "train.py", "--epochs", "3"])


def test_job_cost_asks_for_the_environments_credentials_before_any_aws_call(monkeypatch):
    no_credentials(monkeypatch)
    with pytest.raises(SystemExit, match=r"^error: no AWS credentials found for dev \(account 111111111111, "
                                         r"us-east-1\): sign in \(aws sso login --profile ml-platform-dev"):
        job.main(["cost", "dev", "job-1"])


class Refusing:
    """A session whose every call is refused, as with credentials that lack the permission."""

    def client(self, service):
        return self

    def __getattr__(self, operation):
        def call(**kwargs):
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "User: arn:aws:sts::1:x is not\n"
                               "authorized to perform: batch:DescribeJobs"}}, "DescribeJobs")
        return call


def test_an_aws_refusal_is_one_line_naming_the_call_not_a_traceback():
    with pytest.raises(SystemExit) as done:
        job.main(["logs", "dev", "job-1"], session_factory=lambda env: Refusing())
    assert str(done.value) == ("error: AWS refused DescribeJobs: AccessDeniedException: User: arn:aws:sts::1:x is not "
                               "authorized to perform: batch:DescribeJobs (the credentials lack that permission)")


def test_a_stack_not_deployed_yet_is_one_line_with_the_deploy_command():
    class NoStack:
        def describe_stacks(self, StackName):
            raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not "
                               "exist"}}, "DescribeStacks")
    with pytest.raises(SystemExit, match=r"^error: stack dev-Data does not exist in this account and Region: deploy "
                                         r"it first \(./platform deploy dev\)$"):
        dataset.stack_output(NoStack(), "dev-Data", "DatasetBucketName")


# --- activate-tags: the management (payer) account's credentials --------------------------------------------------

class Organization:
    def __init__(self, caller, payer=None, members=()):
        self.caller, self.payer, self.members = caller, payer, set(members)

    def __call__(self, region_name):  # the session factory
        return self

    def get_credentials(self):
        return object()

    def client(self, service):
        return self

    def get_caller_identity(self):
        return {"Account": self.caller, "Arn": f"arn:aws:iam::{self.caller}:user/ops"}

    def describe_organization(self):
        if self.payer is None:
            raise ClientError({"Error": {"Code": "AWSOrganizationsNotInUseException"}}, "DescribeOrganization")
        return {"Organization": {"MasterAccountId": self.payer}}

    def describe_account(self, AccountId):
        if AccountId not in self.members:
            raise ClientError({"Error": {"Code": "AccountNotFoundException"}}, "DescribeAccount")
        return {"Account": {"Id": AccountId}}


@pytest.fixture
def dev(config):
    return config.environments["dev"]


@pytest.mark.parametrize("organization", [
    Organization("999999999999", payer="999999999999", members={"111111111111"}),  # the payer of dev's account
    Organization("111111111111"),  # dev's account in no organization pays for itself
], ids=["payer", "standalone"])
def test_tags_are_activated_with_the_payers_credentials(dev, organization):
    assert aws_access.payer_session(dev, session_factory=organization) is organization


@pytest.mark.parametrize("organization,message", [
    (Organization("111111111111", payer="999999999999", members={"111111111111"}),
     r"^error: tags are activated in the management \(payer\) account 999999999999, but these credentials are of "
     r"account 111111111111 .*: run with 999999999999's credentials, e.g. AWS_PROFILE=ml-platform-payer$"),
    (Organization("999999999999", payer="999999999999"),
     r"^error: dev's account 111111111111 is not in the organization of payer account 999999999999"),
    (Organization("222222222222"), r"^error: account 222222222222 is in no organization, so it pays only for itself"),
], ids=["dev's own credentials", "another organization", "another standalone account"])
def test_tag_activation_refuses_credentials_that_do_not_pay_for_the_environment(dev, organization, message):
    with pytest.raises(SystemExit, match=message):
        aws_access.payer_session(dev, session_factory=organization)


def test_tag_activation_without_credentials_asks_for_the_payers_not_the_environments(dev, monkeypatch):
    no_credentials(monkeypatch)
    with pytest.raises(SystemExit) as error:
        budget.main(["activate-tags", "dev"])
    assert str(error.value).startswith("error: no AWS credentials found for the management (payer) account that pays "
                                       "for dev (account 111111111111): sign in (aws sso login --profile "
                                       "ml-platform-payer")


# --- the platform script: help and bad arguments before setup or synth --------------------------------------------

def platform(*args):
    return subprocess.run([str(ROOT / "platform"), *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_platform_script_answers_help_and_bad_arguments_before_any_work():
    listed = platform("help")
    assert listed.returncode == 0 and "./platform job ...        submit ENV QUEUE" in listed.stdout
    up = platform("up", "--help")
    assert (up.returncode, up.stdout.splitlines()[0].split()[:2]) == (0, ["./platform", "up"])
    for args, message in [(("nosuch",), "error: unknown command 'nosuch': ./platform help lists the commands"),
                          (("up", "dev"), "error: ./platform up takes no arguments (usage: ./platform up --help)"),
                          (("diff",), "error: ./platform diff needs an environment, e.g. ./platform diff dev "
                                      "(usage: ./platform diff --help)")]:
        answer = platform(*args)
        assert (answer.returncode, answer.stderr, answer.stdout) == (2, message + "\n", "")


def test_tco_help_synthesizes_nothing():
    answer = platform("tco", "--help")
    assert answer.returncode == 0 and answer.stdout.startswith("usage: ")
    assert answer.stderr == ""  # no setup, synth or CDK CLI output


# Where ops/ makes a boto3 client or session itself instead of taking it from ops.aws_access, and why.
OWN_SESSIONS = {
    "local/deploy.py": "the local emulator, with dummy credentials",
    "local/run.py": "the example job against the local emulator's S3, with dummy credentials",
    "refresh_prices.py": "public Price List and Spot data, no environment's account",
    "rehearse.py": "the rehearsal's checkpoints in the local emulator's S3 (--s3), with dummy credentials",
}


def test_every_aws_session_comes_from_the_credential_check():
    """What docs/ARCHITECTURE.md ("Operator access") claims: a new exception must be argued here."""
    direct = {path.relative_to(ROOT / "ops").as_posix() for path in (ROOT / "ops").rglob("*.py")
              if re.search(r"boto3\.(session\.Session|client|resource)\(", path.read_text())}
    assert direct == set(OWN_SESSIONS)


def test_diff_and_deploy_check_the_credentials_of_the_profile_the_cdk_cli_would_use(monkeypatch):
    no_credentials(monkeypatch)  # what ./platform diff|deploy ENV [--profile P] runs before the CDK CLI
    with pytest.raises(SystemExit, match=r"^error: the AWS credentials for dev \(account 111111111111, us-east-1\) do "
                                         r"not work \(The config profile \(nosuch\) could not be found\): sign in"):
        aws_access.main(["dev", "--profile", "nosuch"])
    with pytest.raises(SystemExit, match=UNKNOWN):
        aws_access.main(["nosuch"])
