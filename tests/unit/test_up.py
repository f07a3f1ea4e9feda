"""./platform up after setup (ops/local/up.py) and the quiet CDK CLI runs it is made of (ops/cdk_cli.py): headers for
every step, a summary that fits on one screen and names the files with the whole tables, the tools' output in a
log shown only on failure. The steps themselves run for real in the emulator, compliance and cost tests."""

import sys

import pytest

from ops import cdk_cli, terminal
from ops.local import deploy as local_deploy
from ops.local import up
from ops.cost_estimate import EnvironmentEstimate
from ops.lint import CheckovResult, LintResult
from ops.local.report import MISSING, PARTIAL, Finding, ResourceReport, StackReport


LOCAL_RUN = """==> local run: example-1, checkpoints at s3://b/checkpoints/training/example-1/ (emulated S3)
    attempt 1: SIGTERM after it reported epoch 3 (a simulated Spot reclaim); checkpointed at epoch 4 -> exit 143: attempt 1: stopped at epoch 4 of 30
    attempt 2: resuming from the checkpoint of epoch 4 -> exit 0: run 169cfc6a0d9e4b7c8a1f2e3d4c5b6a79 finished: holdout accuracy 0.849, 2 attempt(s), cost 0.000281 USD

The run it recorded (./platform runs show --local 169cfc6a0d9e4b7c8a1f2e3d4c5b6a79):
Run 169cfc6a0d9e4b7c8a1f2e3d4c5b6a79 (example-1, experiment training): FINISHED
"""


@pytest.fixture
def steps(monkeypatch, tmp_path):
    """Every step of up replaced by its result, so the test sees what up makes of them."""
    called = []
    monkeypatch.setattr(up, "shown", lambda path: path.name)
    monkeypatch.setattr(up, "synth", lambda assembly, log: [tmp_path / f"t{i}.template.json" for i in range(13)])
    monkeypatch.setattr(up, "nag_acknowledgements", lambda assembly: [("dev/Core/Key/Resource", "AwsSolutions-IAM5")])
    lint = {"result": LintResult(13, [], CheckovResult(failed=[], skipped=[("r", "CKV_AWS_1", "why")], passed=700))}
    monkeypatch.setattr(up, "lint_assembly", lambda templates: lint["result"])
    estimates = [EnvironmentEstimate("dev", "us-east-1", 1500.0, lines=[("GPU", "fleet", 900.0)]),
                 EnvironmentEstimate("prod", "us-west-2", None, lines=[("GPU", "fleet", 9000.0)])]
    monkeypatch.setattr(up.cost_estimate, "estimates", lambda assembly, assumptions: estimates)
    reports = [StackReport("dev-Data", "CREATE_COMPLETE", [
        ResourceReport("Bucket", "AWS::S3::Bucket", "b", PARTIAL, [Finding("lifecycle rules", False, "0 of 4 applied")]),
        ResourceReport("Alarm", "AWS::CloudWatch::Alarm", None, MISSING),
        ResourceReport("Key", "AWS::KMS::Key", "k", findings=[Finding("rotation", True, "on")])])]
    deployed = {"result": local_deploy.LocalDeploy(reports, "localhost:1", {})}

    def deploy(assembly, dev, logs):
        called.append("deploy")
        return deployed["result"]
    monkeypatch.setattr(local_deploy, "synthesize_and_deploy", deploy)

    def local_run(command, what, log):
        called.append(command[-1])
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(LOCAL_RUN)
        return 9.0
    monkeypatch.setattr(up, "run_logged", local_run)
    return {"lint": lint, "deployed": deployed, "called": called, "logs": tmp_path / "logs",
            "run": lambda: up.main([], assembly=tmp_path / "cdk.out", local_assembly=tmp_path / "local",
                                   logs=tmp_path / "logs")}


def test_up_shows_every_step_and_ends_with_a_summary_on_one_screen(steps, capsys):
    assert steps["run"]() == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[1] for line in out if line.startswith("==> ")] == ["2/6", "3/6", "4/6", "5/6", "6/6"]
    summary = out[out.index("== Summary " + "=" * 60):]
    assert len(out) < 40
    assert summary[1:5] == [
        "Synthesized and validated: 13 templates of 3 environments in cdk.out",
        "  cdk-nag    no unacknowledged finding; 1 acknowledged, each with its reason on its resource (1 rules)",
        "  cfn-lint   0 errors",
        "  checkov    0 failed, 700 passed, 1 suppressed with a reason on the resource"]
    assert "  dev              900 USD  (60% of its 1,500 USD budget)" in summary
    assert "  prod           9,000 USD" in summary
    assert summary[summary.index("  prod           9,000 USD") + 1:][:2] == [
        "Emulator: dev deployed to moto, 1 stacks CREATE_COMPLETE as reported; of 3 resources 1 as declared",
        "  1 PARTIAL, 1 NOT CREATED: expected (moto skips those types and settings); each in emulator-report.txt"]
    assert summary[summary.index("Example job, as a queue runs it, on moto's S3 (the whole run record: "
                                 "local-run.txt):") + 1:][:4] == [
        "  attempt 1: SIGTERM after it reported epoch 3 (a simulated Spot reclaim); checkpointed at epoch 4 -> exit 143",
        "  attempt 2: resuming from the checkpoint of epoch 4 -> exit 0",
        "  one run recorded: holdout accuracy 0.849, cost 0.000281 USD; its passport:",
        "    ./platform runs show --local 169cfc6a0d9e4b7c8a1f2e3d4c5b6a79"]
    assert steps["called"] == ["deploy", "ops.local.run"]
    assert summary[-4:][0].startswith("  ./platform test")
    table = (steps["logs"] / "emulator-report.txt").read_text()
    assert table.startswith("What was deployed to the emulator")
    assert "  PARTIAL       1 x AWS::S3::Bucket: lifecycle rules not as declared" in table  # the gaps by type
    assert "  NOT CREATED  1 x AWS::CloudWatch::Alarm" in table
    assert (steps["logs"] / "cost-estimate.txt").read_text().startswith("Monthly cost estimate. Assumptions:")


def test_the_summary_fits_one_screen_of_24_lines(steps, capsys):
    """A new user reads the summary as the verdict: all of it on a 24-line terminal, the emulator's gaps one line."""
    assert steps["run"]() == 0
    out = capsys.readouterr().out.splitlines()
    summary = out[out.index("== Summary " + "=" * 60) - 1:]  # with the blank line before it
    assert len(summary) <= up.SCREEN_LINES - 1, "\n".join(summary)  # and the shell's prompt after it
    assert max(len(line) for line in summary) <= 120
    assert [line for line in summary if "PARTIAL" in line or "NOT CREATED" in line] == [
        summary[summary.index(next(line for line in summary if line.startswith("Emulator: "))) + 1]]


def test_a_gap_moto_did_not_have_before_is_named_not_called_expected(steps, capsys):
    steps["deployed"]["result"].reports[0].resources.append(ResourceReport("Queue", "AWS::SQS::Queue", None, MISSING))
    assert steps["run"]() == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if "NOT CREATED" in line]
    assert line == ("  1 PARTIAL, 2 NOT CREATED; 1 of these gaps not known from moto before (AWS::SQS::Queue): see "
                    "emulator-report.txt")


def test_each_long_step_shows_a_spinner_under_its_header_on_a_terminal(steps, monkeypatch, capsys):
    monkeypatch.setattr(terminal, "on_terminal", lambda stream: True)
    monkeypatch.setenv("COLUMNS", "120")  # a terminal wide enough for the longest header, whatever runs the test
    drawn = []
    monkeypatch.setattr(terminal.Progress, "_write", lambda self, text: drawn.append(text))
    assert steps["run"]() == 0
    spinners = [text.split(" (")[0] for text in drawn if text.startswith("\r\033[K|")]
    assert spinners == ["\r\033[K| synthesize dev, staging, prod into cdk.out", "\r\033[K| cfn-lint and checkov over every template",
                        "\r\033[K| deploy dev to the emulator", "\r\033[K| run the example job as a queue runs it: a real SIGTERM, "
                        "a resumed attempt, one recorded run"]
    assert drawn.count("\r\033[K") == 4  # each cleared before the step's result line


def test_a_lint_finding_ends_up_before_the_emulator_with_the_finding_and_one_line(steps, capsys):
    steps["lint"]["result"] = LintResult(13, ["devCore.template.json: E3001 bad (Resources/X)"],
                                         CheckovResult(failed=[], skipped=[], passed=1))
    with pytest.raises(SystemExit, match=r"^error: cfn-lint or checkov found the problems above; fix them, then "
                                         r"./platform lint$"):
        steps["run"]()
    assert "devCore.template.json: E3001 bad" in capsys.readouterr().err
    assert steps["called"] == []


def test_an_incomplete_emulator_deploy_fails_up_after_its_summary(steps, capsys):
    steps["deployed"]["result"].reports[0].status = "CREATE_FAILED"
    assert steps["run"]() == 1
    assert "Emulator: dev deployed to moto, 1 stacks NOT complete; of 3 resources 1 as declared" in \
        capsys.readouterr().out.split("== Summary")[1]


def test_a_tool_that_succeeds_prints_nothing_and_logs_its_output(tmp_path, capsys):
    log = tmp_path / "cdk.log"
    cdk_cli.run_logged([sys.executable, "-c", "print('Successfully synthesized to cdk.out')"], "synth", log=log)
    assert capsys.readouterr() == ("", "")
    assert "Successfully synthesized to cdk.out" in log.read_text()


def test_a_tool_that_fails_shows_the_apps_error_line_and_names_its_log(tmp_path, capsys):
    log = tmp_path / "cdk.log"
    noisy = "print('npm warn something'); print('error: config: environments.dev.account=1 is invalid'); exit(1)"
    with pytest.raises(SystemExit) as done:
        cdk_cli.run_logged([sys.executable, "-c", noisy], "cdk synth", log=log)
    assert str(done.value) == f"error: cdk synth failed (exit 1); its whole output is in {log}"
    assert capsys.readouterr().err == "error: config: environments.dev.account=1 is invalid\n"
    assert "npm warn something" in log.read_text()


def test_a_tool_that_fails_without_an_error_line_shows_its_last_lines(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cdk_cli.run_logged([sys.executable, "-c", "print('\\n'.join(map(str, range(40)))); exit(3)"], "bootstrap",
                           log=tmp_path / "cdk.log")
    assert capsys.readouterr().err.split() == [str(n) for n in range(15, 40)]


def test_synth_of_an_unknown_environment_is_refused_before_the_cdk_cli_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(cdk_cli, "run_logged", lambda *a, **k: pytest.fail("the CDK CLI was started"))
    with pytest.raises(SystemExit, match=r"^error: unknown environment 'qa': config/environments.toml declares"):
        cdk_cli.synth(tmp_path / "out", environments="qa")
