"""cfn-lint and checkov over every template of a synthesized cloud assembly.

Usage: python -m ops.lint [ASSEMBLY_DIR]   (default cdk.out); exits 1 when any template has a cfn-lint error or
an unsuppressed checkov finding. A checkov suppression sits in the template next to its resource, with its
reason (ml_platform_constructs.foundation.nag_support.suppress_checkov); the report lists them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ops import terminal

_RULES: dict[tuple[str, ...], tuple] = {}


def templates(assembly_dir: Path) -> list[Path]:
    return sorted(assembly_dir.rglob("*.template.json"))


def lint_template(path: Path, regions: list[str]) -> list[str]:
    """cfn-lint findings at error level (E*) for one template, as printable lines.

    The rule set is loaded once per Region list and reused: loading it is most of cfn-lint's time. cfn-lint is
    imported here, not with the module: importing it takes about 0.6 s, which every test file paid through the
    tests' conftest (which imports this module for the background scans) and every command that never lints.
    """
    from cfnlint.api import decode_str, run_template_by_data

    config, rules = _rules(regions)
    template, errors = decode_str(path.read_text())
    matches = errors or list(run_template_by_data(template, config, rules))
    return [f"{path.name}: {m.rule.id} {m.message} ({'/'.join(map(str, m.path))})"
            for m in matches if m.rule.id.startswith("E")]


def _rules(regions: list[str]) -> tuple:
    """cfn-lint's configuration and rules for a Region list, loaded once."""
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner import Runner

    key = tuple(regions)
    if key not in _RULES:
        config = ConfigMixIn(regions=regions)
        _RULES[key] = (config, Runner(config).rules)
    return _RULES[key]


# checkov runs from its own environment (its pins conflict with the project's): ./platform setup makes it.
CHECKOV = Path(__file__).resolve().parent.parent / ".venv" / "checkov" / "bin" / "checkov"


@dataclass(frozen=True)
class CheckovResult:
    failed: list[str]  # "<template>: <check id> <resource> (<check name>)"
    skipped: list[tuple[str, str, str]]  # (resource, check id, the suppression's reason)
    passed: int


# checkov as its script runs it, after reading its arguments from the first line of stdin (JSON): importing checkov
# is most of its start (about 2.5 s of CPU), and it happens before the templates are needed.
_CHECKOV_WAITING = """\
import json, sys, warnings
from checkov.main import Checkov
argv = json.loads(sys.stdin.readline() or "null")
if argv is None:
    sys.exit(0)  # no templates came: the caller stopped
sys.argv[1:] = argv
with warnings.catch_warnings():
    warnings.simplefilter("ignore", category=SyntaxWarning)
    sys.exit(Checkov(argv=argv).run())
"""


def _checkov_arguments(paths: list[Path]) -> list[str]:
    # --skip-download and no API key (start_checkov's environment): nothing leaves the machine.
    return ["--framework", "cloudformation", "--output", "json", "--compact", "--skip-download",
            *[arg for path in paths for arg in ("--file", str(path))]]


def start_checkov(paths: Optional[list[Path]] = None) -> subprocess.Popen:
    """Starts checkov's CloudFormation checks over ``paths`` in one process, so a caller can do other work
    meanwhile; ``checkov_result`` waits for it. Without ``paths`` the process loads checkov (most of its start) and
    waits for them: a caller starts it before synthesizing and gives it the templates with ``scan_templates``."""
    if not CHECKOV.exists():
        raise SystemExit(f"lint: checkov is not installed at {CHECKOV}: run ./platform setup")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BC_", "PRISMA_"))}
    # One process, no forked workers: the scans already run as two processes (checkov beside cfn-lint), and checkov's
    # workers (one per core, parsing the templates and sending each back pickled) cost more CPU than they save: 8.9 ->
    # 7.0 s of CPU over the app's 13 templates on two cores, the same findings. Its own switch (common/parallelizer),
    # the mode it picks itself under a debugger; a value of the caller's is kept.
    env.setdefault("CHECKOV_PARALLELIZATION_TYPE", "none")
    if paths is None:
        # -P: the working directory is not put first on checkov's import path (as its script does not).
        return terminal.start([str(CHECKOV.parent / "python"), "-P", "-c", _CHECKOV_WAITING], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return terminal.start([str(CHECKOV), *_checkov_arguments(paths)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env)


def scan_templates(process: subprocess.Popen, paths: list[Path]) -> None:
    """Gives a scan started without its templates (``start_checkov()``, ``start_cfn_lint()``) the templates to
    scan; its ``*_result`` waits for it as for one started with them."""
    if "--cfn-lint-json" in process.args:  # cfn-lint: the paths
        line = json.dumps(list(map(str, paths)))
    else:
        line = json.dumps(_checkov_arguments(paths))
    try:
        process.stdin.write(line + "\n")
        process.stdin.close()
    except BrokenPipeError:
        pass  # it has ended already: its result says how
    process.stdin = None  # closed: communicate() would flush it


def checkov_result(process: subprocess.Popen) -> CheckovResult:
    stdout, stderr = _communicate(process)
    if process.returncode not in (0, 1) or not stdout.strip():  # 1: findings
        raise SystemExit(f"lint: checkov failed (exit {process.returncode}):\n{stderr[-2000:]}")
    reports = json.loads(stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed, skipped, passed = [], [], 0
    for report in reports:
        results = report.get("results", {})
        passed += report.get("summary", {}).get("passed", 0)
        failed += [f"{Path(c['file_path']).name}: {c['check_id']} {c['resource']} ({c['check_name']})"
                   for c in results.get("failed_checks", [])]
        skipped += [(c["resource"], c["check_id"], c.get("check_result", {}).get("suppress_comment", ""))
                    for c in results.get("skipped_checks", [])]
    return CheckovResult(failed=failed, skipped=skipped, passed=passed)


def start_cfn_lint(paths: Optional[list[Path]] = None, *, regions: Sequence[str] = ("us-east-1",)
                   ) -> subprocess.Popen:
    """cfn-lint over ``paths`` in a background process (``cfn_lint_result`` waits for it), so that a test
    session overlaps its CPU time with other work. Without ``paths`` the process loads cfn-lint and its rules for
    ``regions`` (the templates' Regions: about 2 s of CPU for the first) and waits for them (``scan_templates``)."""
    waiting = paths is None
    return terminal.start([sys.executable, "-m", "ops.lint", "--cfn-lint-json",
                           *(["-", *regions] if waiting else map(str, paths))],
                          stdin=subprocess.PIPE if waiting else None, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)


def _communicate(process: subprocess.Popen) -> tuple[str, str]:
    """The scan's output; an interrupt (or any error) while waiting ends its process group."""
    try:
        stdout, stderr = process.communicate()
    except BaseException:
        terminal.stop(process)
        raise
    terminal.forget(process)
    return stdout, stderr


def cfn_lint_result(process: subprocess.Popen) -> dict[str, list[str]]:
    """Each template's cfn-lint errors (``lint_template`` lines), by path."""
    stdout, stderr = _communicate(process)
    if process.returncode != 0:
        raise SystemExit(f"lint: cfn-lint failed (exit {process.returncode}):\n{stderr[-2000:]}")
    return json.loads(stdout)


@dataclass(frozen=True)
class LintResult:
    templates: int
    cfn_lint_errors: list[str]
    checkov: CheckovResult

    @property
    def failed(self) -> bool:
        return bool(self.cfn_lint_errors or self.checkov.failed)

    def lines(self) -> list[str]:
        return [*self.cfn_lint_errors, f"cfn-lint: {self.templates} templates, {len(self.cfn_lint_errors)} errors",
                *self.checkov.failed,
                f"checkov: {self.templates} templates, {self.checkov.passed} passed, {len(self.checkov.failed)} failed, "
                f"{len(self.checkov.skipped)} suppressed with a reason in the template"]


def lint_assembly(paths: list[Path]) -> LintResult:
    """cfn-lint and checkov (in parallel) over the templates."""
    scanning = start_checkov(paths)
    try:
        errors = [line for path in paths for line in lint_template(path, _regions(path))]
    except BaseException:
        terminal.stop(scanning)
        raise
    return LintResult(len(paths), errors, checkov_result(scanning))


def nag_acknowledgements(assembly_dir: Path) -> list[tuple[str, str]]:
    """(construct path, rule) of every cdk-nag finding acknowledged in a synthesized assembly, each with its reason
    next to the resource. Unacknowledged ones never reach an assembly: they fail the synth (app.py)."""
    found = []
    for path in sorted(assembly_dir.rglob("*.metadata.json")):
        for construct_path, entries in json.loads(path.read_text()).items():
            found += [(construct_path, rule.removeprefix("Annotation::").split("[")[0])
                      for entry in entries if entry["type"] == "aws:cdk:acknowledged-rules"
                      for rule in entry["data"] if "AwsSolutions-" in rule]
    return found


def main(argv: list[str]) -> int:
    if argv[:1] == ["--cfn-lint-json"]:
        paths = argv[1:]
        if paths[:1] == ["-"]:  # start_cfn_lint(): each Region's rules first, then the paths from stdin
            for region in paths[1:]:
                _rules([region])
            paths = json.loads(sys.stdin.readline() or "[]")
        print(json.dumps({path: lint_template(Path(path), _regions(Path(path))) for path in paths}))
        return 0
    assembly_dir = Path(argv[0] if argv else "cdk.out")
    paths = templates(assembly_dir)
    if not paths:
        print(f"error: lint: no templates under {assembly_dir}; synthesize first (./platform synth)", file=sys.stderr)
        return 1
    with terminal.progress(f"cfn-lint and checkov over {len(paths)} templates"):
        result = lint_assembly(paths)
    print("\n".join(result.lines()))
    return 1 if result.failed else 0


def _regions(path: Path) -> list[str]:
    """The Region the template is bound to, from its assembly manifest (us-east-1 if unbound)."""
    manifest = json.loads((path.parent / "manifest.json").read_text())
    for artifact in manifest["artifacts"].values():
        if artifact.get("properties", {}).get("templateFile") == path.name:
            region = artifact["environment"].rsplit("/", 1)[-1]
            return [region if region != "unknown-region" else "us-east-1"]
    return ["us-east-1"]


if __name__ == "__main__":
    from ops.terminal import entry_point

    entry_point(main)
