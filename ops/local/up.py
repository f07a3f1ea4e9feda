"""./platform up after setup: synthesize every environment, validate it, estimate its cost, deploy dev to the local
emulator, run the example job as a queue runs it, and end with a summary that fits on one screen. The long tables
go to files it names.

  ./platform up    (no options: it needs no AWS account; the tools' output goes to logs/, shown when one fails)
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from ops import cost_estimate, terminal
from ops.local import deploy as local_deploy
from ops.aws_access import environment
from ops.cdk_cli import LOGS, ROOT, run_logged, synth
from ops.cli import Parser
from ops.lint import LintResult, lint_assembly, nag_acknowledgements
from ops.local.report import CREATED, MISSING, NOT_READ, PARTIAL, unknown_gaps
from stacks import config as platform_config

STEPS = 6  # setup (the platform script), synth, lint, cost, emulator, the example job
SCREEN_LINES = 24  # the summary fits a terminal of this height


def header(step: int, text: str) -> None:
    print(f"==> {step}/{STEPS} {text}", flush=True)


def long_step(step: int, text: str) -> terminal.Progress:
    """The header, and the step's work inside the Progress returned: on a terminal a spinner with its seconds under
    the header (the header already says what it does, so no plain line repeats it in CI)."""
    header(step, text)
    return terminal.Progress(text.split(" (")[0], announce=False)


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def validation_lines(templates: int, environments: int, assembly: str, acknowledged: list[tuple[str, str]],
                     lint: LintResult) -> list[str]:
    rules = {rule for _, rule in acknowledged}
    return [f"Synthesized and validated: {templates} templates of {environments} environments in {assembly}",
            f"  cdk-nag    no unacknowledged finding; {len(acknowledged)} acknowledged, each with its reason on its "
            f"resource ({len(rules)} rules)",
            f"  cfn-lint   {len(lint.cfn_lint_errors)} errors",
            f"  checkov    {len(lint.checkov.failed)} failed, {lint.checkov.passed} passed, "
            f"{len(lint.checkov.skipped)} suppressed with a reason on the resource"]


def estimate_lines(estimates: list[cost_estimate.EnvironmentEstimate]) -> list[str]:
    return [f"  {e.name:<10} {e.total():>9,.0f} USD" + (f"  ({e.total() / e.budget:.0%} of its {e.budget:,.0f} USD "
                                                         "budget)" if e.budget else "") for e in estimates]


def emulator_lines(deployed: local_deploy.LocalDeploy, table: str) -> list[str]:
    """What the emulator created, in two lines: the counts, and its gaps in one line, with why they are expected (or
    which are not) and the file with the whole table."""
    resources = [r for stack in deployed.reports for r in stack.resources]
    counts = {status: sum(1 for r in resources if r.status == status) for status in (CREATED, PARTIAL, MISSING, NOT_READ)}
    unread = f", {counts[NOT_READ]} not read back" if counts[NOT_READ] else ""
    found = ", ".join(f"{counts[s]} {s}" for s in (PARTIAL, MISSING) if counts[s])
    unknown = unknown_gaps(deployed.reports)
    if not found:
        gaps = f"  no gaps: moto created and applied everything it read back; table: {table}"
    elif unknown:
        gaps = (f"  {found}; {len(unknown)} of these gaps not known from moto before ({', '.join(unknown[:2])}"
                f"{', ...' if len(unknown) > 2 else ''}): see {table}")
    else:
        gaps = f"  {found}: expected (moto skips those types and settings); each in {table}"
    return [f"Emulator: dev deployed to moto, {len(deployed.reports)} stacks "
            f"{'CREATE_COMPLETE as reported' if deployed.complete else 'NOT complete'}; of {len(resources)} resources "
            f"{counts[CREATED]} as declared{unread}", gaps]


def local_run_lines(output: str) -> list[str]:
    """Each attempt's outcome, the run's goodput ledger in one line, its held-out accuracy and cost, and the command
    that shows its passport, from ops.local.run's output."""
    attempts = re.findall(r"^    (attempt \d+: .*? -> exit \d+)", output, re.M)
    run = re.search(r"\(\./platform runs show --local (\w+)\)", output)
    result = re.search(r"finished: (holdout accuracy [\d.]+), \d+ attempt\(s\), (cost [\d.e-]+ USD)", output)
    recorded = f"{result[1]}, {result[2]}; " if result else ""
    ledger = re.search(r"^    (ledger: .*)$", output, re.M)  # ops.local.run's one-line goodput ledger
    return [*(f"  {line}" for line in attempts), *([f"  {ledger[1]}"] if ledger else []),
            f"  one run recorded: {recorded}its passport:",
            f"    ./platform runs show --local {run[1] if run else '(not found)'}"]


def main(argv: list[str], *, assembly: Path = ROOT / "cdk.out", local_assembly: Path = ROOT / "cdk.out.local",
         logs: Path = LOGS) -> int:
    Parser("./platform up", description=__doc__).parse_args(argv)
    try:
        config = platform_config.load()
    except platform_config.ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    names, first = list(config.environments), next(iter(config.environments))
    logs.mkdir(exist_ok=True)

    with long_step(2, f"synthesize {', '.join(names)} into {shown(assembly)} (cdk-nag and CDK's template checks run "
                   "inside)"):
        started = time.monotonic()
        templates = synth(assembly, log=logs / "cdk.log")
        acknowledged = nag_acknowledgements(assembly)
    print(f"    {len(templates)} templates, no unacknowledged cdk-nag finding ({time.monotonic() - started:.0f} s)")

    with long_step(3, "cfn-lint and checkov over every template"):
        started = time.monotonic()
        lint = lint_assembly(templates)
    print(f"    cfn-lint {len(lint.cfn_lint_errors)} errors; checkov {len(lint.checkov.failed)} failed, "
          f"{lint.checkov.passed} passed ({time.monotonic() - started:.0f} s)")
    if lint.failed:
        print("\n".join(lint.cfn_lint_errors + lint.checkov.failed), file=sys.stderr)
        raise SystemExit("error: cfn-lint or checkov found the problems above; fix them, then ./platform lint")

    header(4, "monthly cost estimate from the templates")
    assumptions = cost_estimate.Assumptions()
    estimates = cost_estimate.estimates(assembly, assumptions)
    cost_file = logs / "cost-estimate.txt"
    cost_file.write_text(cost_estimate.format_report(assumptions, estimates) + "\n")
    print(f"    {len(estimates)} environments; assumptions and every line in {shown(cost_file)}")

    dev = environment("dev")
    with long_step(5, "deploy dev to the emulator (moto on 127.0.0.1) and read every resource back"):
        started = time.monotonic()
        deployed = local_deploy.synthesize_and_deploy(local_assembly, dev, logs)
    table_file = logs / "emulator-report.txt"
    table_file.write_text(deployed.table() + "\n")
    print(f"    {len(deployed.reports)} stacks on moto at {deployed.endpoint} ({time.monotonic() - started:.0f} s)")

    run_file = logs / "local-run.txt"
    with long_step(6, "run the example job as a queue runs it: a real SIGTERM, a resumed attempt, one recorded run"):
        seconds = run_logged([sys.executable, "-m", "ops.local.run"], "the example job's local run", log=run_file)
    output = run_file.read_text()
    run_lines = local_run_lines(output)
    kept = re.search(r"^    kept: .* in (\S+)/ ", output, re.M)  # the model outlives the emulator (ops.local.run)
    print(f"    {sum(1 for line in run_lines if line.startswith('  attempt '))} attempts, one run in .ml-platform/"
          + (f"; its model and passport in {kept[1]}/" if kept else "") + f" ({seconds:.0f} s)")

    lines = [
        "",
        "== Summary " + "=" * 60,
        *validation_lines(len(templates), len(names), shown(assembly), acknowledged, lint),
        f"Monthly estimate at {assumptions.utilization:.0%} GPU utilization (./platform cost; lines: {shown(cost_file)}):",
        *estimate_lines(estimates),
        *emulator_lines(deployed, shown(table_file)),
        f"Example job, as a queue runs it, on moto's S3 (the whole run record: {shown(run_file)}):",
        *run_lines,
        "Next:",
        "  ./platform test                       the whole test suite (about 3 minutes on 2 cores)",
        "  config/environments.toml              your accounts, Regions, fleets, queues (docs/CONFIGURATION.md)",
        f"  AWS_PROFILE={config.project}-{first} ./platform diff {first}   then ./platform deploy {first} "
        "(docs/COMMANDS.md)",
        "  CI/CD from GitHub with OIDC roles     docs/CI.md",
    ]
    print("\n".join(lines))
    return 0 if deployed.complete else 1


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
