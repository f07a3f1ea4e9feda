"""Benchmarks (a script, not a timed test): synth against its floor, the test suite, cold setup, where synth time goes.

Usage: ./platform bench [--runs N] [--skip-cold]. Prints a Markdown table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(command: list[str], cwd: Path = ROOT, env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env or os.environ.copy(), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def synth(app: str | None, outdir: str, environment: str | None = None) -> list[str]:
    command = ["npx", "--no-install", "cdk", "synth", "--quiet", "--output", outdir, f"{environment}/*" if environment else "**"]
    return command + (["--app", app] if app else []) + (["-c", f"environments={environment}"] if environment else [])


def phases() -> dict[str, float]:
    """Where one in-process synth of every environment spends its time."""
    code = """
import time, json, tempfile
t0 = time.perf_counter()
import aws_cdk
from stacks.app_builder import build
from stacks import config
t1 = time.perf_counter()
ctx = json.load(open('cdk.json'))['context']
out = {}
for validate in (False, True):
    app = aws_cdk.App(outdir=tempfile.mkdtemp(), context=ctx, builtin_cloud_formation_validation=validate)
    a = time.perf_counter(); build(app, config.load()); b = time.perf_counter(); app.synth(); c = time.perf_counter()
    out[validate] = (b - a, c - b)
print(json.dumps({"import": t1 - t0, "construct": out[False][0], "synth_nag": out[False][1],
                  "builtin_validation": out[True][1] - out[False][1]}))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="./platform bench", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-cold", action="store_true", help="skip the cold-setup measurement (several minutes)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    full, floor, one = [], [], []
    for run in range(args.runs):  # interleaved, so machine noise hits all alike
        floor.append(timed(synth(f"{sys.executable} bench/floor_app.py", str(scratch / f"floor{run}"))))
        full.append(timed(synth(None, str(scratch / f"full{run}"))))
        one.append(timed(synth(None, str(scratch / f"dev{run}"), "dev")))
    suite = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    rows = [
        ("`cdk synth '**'`, all environments (median of %d)" % args.runs, f"{statistics.median(full):.1f} s"),
        ("`cdk synth`, one empty stack, same validation (floor)", f"{statistics.median(floor):.1f} s"),
        ("ratio full / floor (issue 9's target: <= 2.2)", f"{statistics.median(full) / statistics.median(floor):.2f}"),
        ("`./platform synth dev` (only the dev stage is built)", f"{statistics.median(one):.1f} s"),
        ("ratio dev / floor", f"{statistics.median(one) / statistics.median(floor):.2f}"),
        ("test suite wall time (target < 60 s)", f"{suite:.1f} s"),
    ]
    for name, seconds in phases().items():
        rows.append((f"in-process phase: {name}", f"{seconds:.2f} s"))
    if not args.skip_cold:
        clone = scratch / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
        env.update(PIP_NO_CACHE_DIR="1", npm_config_cache=str(scratch / "npm-cache"))
        rows.append(("cold setup: fresh clone, no pip/npm cache (`./platform setup`)",
                     f"{timed(['./platform', 'setup'], cwd=clone, env=env):.0f} s"))
    shutil.rmtree(scratch, ignore_errors=True)
    print("| measurement | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
