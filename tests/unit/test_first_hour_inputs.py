"""The first hour of a new user (issue 25), at each command's entry: long steps show progress; nonsense figures are
refused with their range before any synth or sign-in; help says nothing of the project's insides; output read by a
reader that stops early, binary files and setup's heartbeat end in one line. (The Ctrl-C half is test_first_hour.py.)"""

import contextlib
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ml_platform_constructs.operations import cli as library_cli
from ops import (advise, budget, cdk_cli, cost_estimate, dataset, drift_baseline, fleet, job, job_cost, labels, model,
                 quality, runs, tco, terminal)
from tests.unit.test_aws_access import no_credentials

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"


# --- progress -------------------------------------------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_off_a_terminal_is_plain_lines_a_start_each_item_and_a_heartbeat():
    stream = io.StringIO()
    with terminal.progress("running each test file alone", total=2, stream=stream, heartbeat=0.05) as shown:
        shown.advance("tests/a.py")
        time.sleep(0.12)
        shown.advance("tests/b.py")
    lines = stream.getvalue().splitlines()
    assert lines[:2] == ["running each test file alone ...", "  [1/2] tests/a.py"]
    assert lines[-1] == "  [2/2] tests/b.py"
    assert any(line.startswith("  ... still running each test file alone (") for line in lines[2:-1])
    assert "\r" not in stream.getvalue()


def test_progress_on_a_terminal_is_a_spinner_with_the_count_and_seconds_cleared_at_the_end(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    stream = Terminal()
    with terminal.progress("synthesizing dev", total=3, stream=stream, interval=0.01) as shown:
        shown.advance("run 1")
        time.sleep(0.05)
    text = stream.getvalue()
    assert "\r\033[K| synthesizing dev" in text and "[1/3] run 1 (0 s)" in text
    assert text.endswith("\r\033[K") and "\n" not in text


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setenv("CI", "true")  # progress as CI shows it: plain lines


def test_cost_says_what_it_does_before_its_synth(plain, monkeypatch, capsys, tmp_path):
    seen = []
    monkeypatch.setattr(cost_estimate, "synth", lambda assembly: seen.append(capsys.readouterr().err))
    monkeypatch.setattr(cost_estimate, "estimates", lambda *args: [])
    assert cost_estimate.main(["--synth", "--assembly", str(tmp_path)]) == 0
    assert seen == ["synthesizing every environment for the estimate (cdk-nag and CDK's template checks run inside) "
                    "...\n"]


def test_synth_says_what_it_does_before_the_cdk_cli_runs(plain, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cdk_cli, "synth", lambda outdir, environments: seen.append(capsys.readouterr().err) or [])
    assert cdk_cli.main(["dev"]) == 0
    assert seen == ["synthesizing dev into cdk.out (cdk-nag and CDK's template checks run inside) ...\n"]


# --- figures checked before any work --------------------------------------------------------------------------------

@pytest.fixture
def no_work(monkeypatch):
    """Any synth, credential check or AWS session fails the test: the figure had to be refused before it."""
    def called(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")
    for module in (fleet, job, dataset, drift_baseline, budget):
        for name in ("session_for", "payer_session"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, called)
    monkeypatch.setattr(cost_estimate, "synth", called)
    monkeypatch.setattr(tco, "synth", called)
    no_credentials(monkeypatch)


@pytest.mark.parametrize("module,argv,message", [
    (budget, ["what-if", "dev", "--actual", "-5"],
     "error: ./platform budget: argument --actual: -5 is out of range: Budgets' actual spend this month in USD, from 0 "
     "to 10,000,000 (e.g. --actual 1200) (usage: ./platform budget --help)"),
    (budget, ["what-if", "dev", "--running", "g5.xlarge=1000000"],
     "error: ./platform budget: argument --running: 'g5.xlarge=1000000': COUNT 1000000 is out of range: instances of "
     "one type, from 1 to 1,000 (e.g. --running g5.xlarge=4@2.5: 4 instances that have run 2.5 hours) (usage: "
     "./platform budget --help)"),
    (budget, ["what-if", "dev", "--on-demand", "g5.xlarge=2@1000"],
     "error: ./platform budget: argument --on-demand: 'g5.xlarge=2@1000': HOURS 1000 is out of range: how long they "
     "have run this month, from 0 to 744 (e.g. --on-demand g5.xlarge=4@2.5: 4 instances that have run 2.5 hours) "
     "(usage: ./platform budget --help)"),
    (budget, ["what-if", "dev", "--budget-age-hours", "-3"],
     "error: ./platform budget: argument --budget-age-hours: -3 is out of range: how old Budgets' figure is, in hours, "
     "from 0 to 744 (e.g. --budget-age-hours 8) (usage: ./platform budget --help)"),
    (fleet, ["scale", "dev", "training", "1000000"],
     "error: ./platform fleet scale: argument N: 1000000 is out of range: the fleet's desired capacity in instances (0 "
     "stops it), from 0 to 1,000 (e.g. ./platform fleet scale dev training 2) (usage: ./platform fleet scale --help)"),
    (fleet, ["scale", "dev", "training", "7"],
     "error: ./platform fleet scale: N=7 is out of range: training's desired capacity, from 0 to its max_capacity 2 in "
     "config/environments.toml (raise max_capacity there and deploy to go higher) (usage: ./platform fleet scale "
     "--help)"),
    (fleet, ["scale", "dev", "training", "-1"],
     "error: ./platform fleet scale: argument N: -1 is out of range: the fleet's desired capacity in instances (0 "
     "stops it), from 0 to 1,000 (e.g. ./platform fleet scale dev training 2) (usage: ./platform fleet scale --help)"),
    (job, ["submit", "dev", "training", "--image", IMAGE, "--name", "r1", "--nodes", "-3", "--", "python", "t.py"],
     "error: ./platform job submit: argument --nodes: -3 is out of range: instances of the job (2 or more: a "
     "multi-node job), from 1 to 8 (e.g. --nodes 2), or an elastic range MIN:MAX (e.g. --nodes 1:8) (usage: "
     "./platform job submit --help)"),
    (job, ["submit", "dev", "training", "--image", IMAGE, "--name", "r1", "--gpus", "0", "--", "python", "t.py"],
     "error: ./platform job submit: argument --gpus: 0 is out of range: GPUs per instance, from 1 to 16 (e.g. --gpus "
     "1) (usage: ./platform job submit --help)"),
    (dataset, ["build", "dev", "imagenet", "v1", "--prefix", "datasets/imagenet/", "--size-gib", "0"],
     "error: ./platform dataset build: argument --size-gib: 0 is out of range: the volume's size in GiB, at least the "
     "dataset's, from 1 to 65,536 (e.g. --size-gib 200) (usage: ./platform dataset build --help)"),
    (drift_baseline, ["dev", "classifier", "sample.csv", "--bins", "1"],
     "error: ./platform drift-baseline: argument --bins: 1 is out of range: histogram bins per numeric feature, from 2 "
     "to 100 (e.g. --bins 10) (usage: ./platform drift-baseline --help)"),
    (cost_estimate, ["--synth", "--capture-gb", "1e30"],
     "error: ./platform cost: argument --capture-gb: 1e30 is out of range: GB in each endpoint's capture bucket, from "
     "0 to 10,000,000 (e.g. --capture-gb 50) (usage: ./platform cost --help)"),
    (tco, ["dev", "--synth", "--jobs-per-month", "-20"],
     "error: ./platform tco: argument --jobs-per-month: -20 is out of range: training jobs a month, from 0 to 100,000 "
     "(e.g. --jobs-per-month 20) (usage: ./platform tco --help)"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_a_nonsense_figure_is_one_line_with_its_range_exit_2_before_any_synth_or_sign_in(module, argv, message,
                                                                                          no_work, capsys):
    with pytest.raises(SystemExit) as done:
        module.main(argv)
    assert (done.value.code, capsys.readouterr().err) == (2, message + "\n")


@pytest.mark.parametrize("argv,message", [
    (["budget", "what-if", "--monthly-limit", "2000", "--actual", "-5"], "argument --actual: -5 is out of range"),
    (["budget", "what-if", "--monthly-limit", "-1"], "argument --monthly-limit: -1 is out of range"),
    (["budget", "what-if", "--monthly-limit", "2000", "--running", "g5.xlarge=1000000"],
     "'g5.xlarge=1000000': COUNT 1000000 is out of range"),
    (["job", "submit", "training", "--image", IMAGE, "--name", "r1", "--nodes", "100", "--", "python", "t.py"],
     "argument --nodes: 100 is out of range: instances of the job (2 or more: a multi-node job), from 1 to 8"),
    (["dataset", "build", "--runbook", "r", "--bucket", "b", "--name", "n", "--version", "v1", "--prefix",
      "datasets/n/", "--size-gib", "-1"], "argument --size-gib: -1 is out of range"),
])
def test_the_librarys_command_refuses_nonsense_figures_before_it_asks_for_a_session(argv, message, capsys):
    def session(**kwargs):
        raise AssertionError("a session was asked for before the arguments were checked")
    with pytest.raises(SystemExit) as done:
        library_cli.main(["--region", "us-east-1", *argv], session_factory=session)
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and err.count("\n") == 1


def test_fleet_scale_checks_the_count_before_it_asks_for_credentials(no_work, capsys):
    with pytest.raises(SystemExit) as done:
        fleet.main(["scale", "dev", "training", "3"])  # dev's training fleet has max_capacity 2
    assert done.value.code == 2 and "from 0 to its max_capacity 2" in capsys.readouterr().err


def test_tco_checks_every_flag_before_its_synth_through_the_platform_script():
    # What ./platform tco runs after setup, and nothing before it: the command checks, then synthesizes. (Not the
    # script itself: in a checkout whose setup is stale it would set up first, minutes of pip and npm.)
    script = (ROOT / "platform").read_text()
    case = script[script.index("\n  tco)\n"):].split(";;", 1)[0]
    assert [line.strip() for line in case.splitlines() if line.strip() and not line.strip().startswith("#")] == [
        "tco)", "setup", 'exec python -m ops.tco --synth "$@"']
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    answer = subprocess.run([sys.executable, "-m", "ops.tco", "--synth", "dev", "--bogus"], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=120)
    assert (answer.returncode, answer.stdout) == (2, "")
    assert answer.stderr == "error: ./platform tco: unrecognized arguments: --bogus (usage: ./platform tco --help)\n"


# --- help says nothing of the project's insides ---------------------------------------------------------------------

# Module paths, `python -m ops...`, issue numbers, internal parameter names: what a new user cannot act on.
INTERNAL = re.compile(r"python -m ops|\bops[/.]\w|[Ii]ssue \d|runtime[/.]|ml_platform_constructs[./]|\bassembly env\b"
                      r"|(?<!examples/)\b\w+\.py\b|shared/|\bphase \d")
HELPS = {
    "fleet": (fleet, [[], ["scale"], ["status"], ["preflight"]]),
    "job": (job, [[], ["submit"], ["list"], ["logs"], ["cancel"]]),
    "job cost": (job_cost, [[]]),
    "dataset": (dataset, [[], ["build"], ["list"]]),
    "drift-baseline": (drift_baseline, [[]]),
    "labels": (labels, [[], ["upload"]]),
    "quality": (quality, [[], ["check"]]),
    "budget": (budget, [[]]),
    "cost": (cost_estimate, [[]]),
    "advise": (advise, [[]]),
    "tco": (tco, [[]]),
    "runs": (runs, [[], ["list"], ["show"]]),
    "model": (model, [[], ["promote"], ["status"]]),
    "synth": (cdk_cli, [[]]),
    "python -m ml_platform_constructs": (library_cli, [[], ["budget", "what-if"], ["job", "submit"],
                                                       ["dataset", "build"], ["drift-baseline"], ["job", "cost"],
                                                       ["prices", "refresh"]]),
}


def helps() -> list[tuple[str, str]]:
    found = []
    for name, (module, commands) in HELPS.items():
        for words in commands:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
                module.main([*words, "--help"])
            found.append((" ".join([name, *words]), out.getvalue()))
    return found


def test_no_commands_help_names_the_projects_insides():
    leaks = [f"{name}: {line.strip()}" for name, text in helps() for line in text.splitlines() if INTERNAL.search(line)]
    assert leaks == []


def test_the_command_list_and_the_bench_scripts_help_name_nothing_internal():
    texts = [subprocess.run([str(ROOT / "platform"), "help"], capture_output=True, text=True, cwd=ROOT).stdout]
    for script in ("benchmark.py", "join_breaks.py", "mutation.py"):
        texts.append(subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], capture_output=True,
                                    text=True, cwd=ROOT).stdout)
    assert [line for text in texts for line in text.splitlines() if INTERNAL.search(line)] == []
    assert all(text.startswith("usage: ./platform bench") for text in texts[1:])


@pytest.mark.parametrize("command", [["advise", "llm-7b-lora", "--json"], ["advise", "resnet50-imagenet", "--all"]])
def test_output_read_by_a_reader_that_stops_early_ends_without_a_traceback(command):
    """`| head -1`: 0.7 ended in a BrokenPipeError traceback. The command stops writing, says nothing more, and exits
    as a process killed by SIGPIPE would (141), or 0 when everything fitted in the pipe before the reader left."""
    process = subprocess.Popen([str(ROOT / "platform"), *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()  # the reader leaves
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) in (0, 141) and stderr == ""


@pytest.mark.parametrize("command", [
    ["model", "judge", "{binary}", "{binary}"],
    ["drift", "check", "dev", "classifier", "--baseline", "{binary}", "--capture", "{dir}"],
    ["quality", "check", "dev", "classifier", "--capture", "{dir}", "--labels", "{binary}"],
    ["advise", "resnet50-imagenet", "--measured", "{binary}"],
])
def test_a_binary_file_given_as_text_is_one_line_that_names_it(command, tmp_path):
    """0.7 ended each of these in a UnicodeDecodeError traceback."""
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    (tmp_path / "capture").mkdir()
    (tmp_path / "capture" / "x.jsonl").write_text("{}\n")
    argv = [a.format(binary=binary, dir=tmp_path / "capture") for a in command]
    result = subprocess.run([str(ROOT / "platform"), *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{binary} is not UTF-8 text" in lines[0] and "binary file?" in lines[0]


def test_a_setup_step_says_every_10_s_that_it_is_still_running_and_stops_saying_so_when_it_ends(tmp_path):
    """The platform script's quietly: while a step runs, a heartbeat line (every SETUP_HEARTBEAT_SECONDS, 10 by
    default); the step here ends only once a heartbeat has been written (an event, not a clock), and the heartbeat
    ends with it."""
    script = (Path(__file__).resolve().parents[2] / "platform").read_text()
    functions = script[script.index('BEAT=""\nquietly() {'):script.index("# Ctrl-C (or SIGTERM) while the script")]
    assert "SETUP_HEARTBEAT_SECONDS:-10" in functions
    err = tmp_path / "err"
    step = f"until grep -q 'a step: ' {err}; do sleep 0.05; done"
    program = (f"LOGS={tmp_path}\n{functions}\nquietly 'a step' bash -c \"{step}\"\n"
               "echo \"beat after: ${BEAT:-none}\"\n")
    done = subprocess.run(["bash", "-c", program], stderr=err.open("w"), stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "SETUP_HEARTBEAT_SECONDS": "0.2"}, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "beat after: none"
    lines = err.read_text().splitlines()
    assert lines and all(re.fullmatch(r"      \.\.\. a step: \d+ s", line) for line in lines), lines
