"""The pinned CDK CLI as the platform's commands run it: quietly. Its output (and npm's) goes to a log file, shown
only when the run fails, so that a command prints its own results and not "Successfully synthesized to ..." or
"Supply a stack id (...) to display its template.", which read like instructions.

  python -m ops.cdk_cli [ENV]    what ./platform synth runs: every environment (or one) into cdk.out
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ops import terminal
from ops.aws_access import environment
from ops.cli import Parser

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "logs"
CDK = ["npx", "--no-install", "cdk"]
_STARTED: set[Path] = set()  # logs this process has begun (each command's run starts its logs afresh)


def run_logged(command: list[str], what: str, *, log: Path, env: Optional[dict[str, str]] = None) -> float:
    """Runs ``command`` in the repository with its output appended to ``log``; returns its seconds. On failure the
    lines the app itself wrote as errors (or else the output's last lines) go to stderr and the command ends with
    one line naming the log. The command runs in its own process group (``ops.terminal.run``): a Ctrl-C ends the
    whole group, and the log says it was interrupted."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        result = terminal.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except BaseException:
        _log(log, f"$ {' '.join(command)}    ({what}: interrupted)\n")
        raise
    _log(log, f"$ {' '.join(command)}    ({what}: exit {result.returncode})\n{result.stdout}\n")
    if result.returncode != 0:
        lines = result.stdout.splitlines()
        print("\n".join([line for line in lines if line.startswith("error: ")] or lines[-25:]), file=sys.stderr)
        raise SystemExit(f"error: {what} failed (exit {result.returncode}); its whole output is in {_shown(log)}")
    return time.monotonic() - started


def _log(log: Path, text: str) -> None:
    with log.open("a" if log in _STARTED else "w") as handle:
        handle.write(text)
    _STARTED.add(log)


def synth(outdir: Path, *, environments: Optional[str] = None, target: Optional[str] = None,
          log: Path = LOGS / "cdk.log", env: Optional[dict[str, str]] = None) -> list[Path]:
    """Synthesizes the app (every environment, or the one named: only its stage is built) into a fresh ``outdir``
    and returns its templates. cdk-nag and aws-cdk-lib's template checks run inside; a finding fails the run."""
    if environments:
        environment(environments)  # an unknown name ends here with the known ones, before the CLI starts
    shutil.rmtree(outdir, ignore_errors=True)  # stale templates must not outlive a changed config
    command = [*CDK, "synth", "--quiet", "--output", str(outdir)]
    command += ["-c", f"environments={environments}"] if environments else []
    command += ["-c", f"target={target}"] if target else []
    run_logged([*command, f"{environments}/*" if environments else "**"], "cdk synth", log=log, env=env)
    return sorted(outdir.rglob("*.template.json"))


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str]) -> int:
    parser = Parser("./platform synth", description="Synthesizes every environment (or ENV alone) into cdk.out, "
                    "with cdk-nag and aws-cdk-lib's template checks; the CDK CLI's output goes to logs/cdk.log.")
    parser.add_argument("env", nargs="?", help="one environment (only its stage is built, which is quicker)")
    args = parser.parse_args(argv)
    if args.env:
        environment(args.env)  # before the progress line: an unknown name is one line
    started = time.monotonic()
    with terminal.progress(f"synthesizing {args.env or 'every environment'} into cdk.out (cdk-nag and CDK's "
                           "template checks run inside)"):
        templates = synth(ROOT / "cdk.out", environments=args.env)
    print(f"synthesized and validated (cdk-nag, CDK template checks): {len(templates)} templates in cdk.out "
          f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    terminal.entry_point(main)
