"""Benchmarks (a script, not a timed test): synth against its floor, the test suite, each test file alone, cold
setup, where synth time goes.

Usage: ./platform bench [--runs N] [--skip-synth] [--skip-suite] [--skip-files] [--skip-cold] [--slowest K]
Prints a Markdown table for docs/BENCHMARKS.md.

Synths of the floor, the whole app and one environment run interleaved, so load from other processes hits all
alike; each reports the minimum of its runs, of wall time and of CPU time (user + system of the CLI, the app and
the jsii kernel). On a shared machine CPU time is the steadier measure: other processes stretch wall time, not the
work done. The load average before and after says how quiet the machine was.

The suite's targets: the whole suite as ./platform test runs it (one pytest-xdist worker per core) under 180 s on
this 2-core machine as features are added, and each test file run alone (`python -m pytest FILE`, one process: the
developer's loop, interpreter start and collection included) under 15 s. Every file is run alone, one after another
(minutes); the table lists the slowest and every file over the target.
"""

from __future__ import annotations

import configparser
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as bench/benchmark.py: the app's modules by their names
from ops import terminal  # noqa: E402
from ops.cli import Parser, bounded  # noqa: E402
from ops.terminal import suite_arguments  # noqa: E402

# The target for all-environment synth against one empty stack with the same validation (docs/BENCHMARKS.md).
SYNTH_RATIO_TARGET = 2.2
SUITE_TARGET_SECONDS = 180  # the whole suite on the project's 2-core machine
FILE_TARGET_SECONDS = 15  # any one test file run alone
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def measured(command: list[str], cwd: Path = ROOT, env: dict | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of a command and every process it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    terminal.run(command, cwd=cwd, env=env or os.environ.copy(), check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed(command: list[str], cwd: Path = ROOT, env: dict | None = None) -> float:
    return measured(command, cwd, env)[0]


def timed_tests(arguments: list[str]) -> tuple[float, float, bool]:
    """Wall and CPU seconds of a pytest run (CPU: user + system of pytest and every process it started, which other
    work on the machine does not stretch) and whether every test passed (a failing file is still timed, and marked)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = terminal.run([*PYTEST, *arguments], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), result.returncode == 0


def synth(app: str | None, outdir: str, environment: str | None = None) -> list[str]:
    command = ["npx", "--no-install", "cdk", "synth", "--quiet", "--output", outdir, f"{environment}/*" if environment else "**"]
    return command + (["--app", app] if app else []) + (["-c", f"environments={environment}"] if environment else [])


PHASES = """
import json, os, resource, sys, tempfile, time
from pathlib import Path

def kernel_cpu():
    # The jsii kernel (node) is a descendant of this process: its CPU from /proc.
    procs = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            procs[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        except (OSError, IndexError, ValueError):
            pass
    mine, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (ppid, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return sum(procs[p][1] for p in mine if p != os.getpid())

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime, kernel_cpu()

mode, marks = sys.argv[1], [("start", cpu())]
from aws_cdk import App, Stack, Validations
from cdk_nag import AwsSolutionsChecks
marks.append(("import aws-cdk-lib and cdk-nag", cpu()))
if mode == "app":
    import stacks.app_builder as builder
    from stacks import config
    marks.append(("import the app's modules", cpu()))
    validation = sys.argv[2]
    if "nag" not in validation:  # build() registers cdk-nag; here it registers nothing
        class NoPlugins:
            @staticmethod
            def of(scope):
                return NoPlugins()

            def add_plugins(self, *plugins):
                pass
        builder.Validations, builder.AwsSolutionsChecks = NoPlugins, lambda app: None
    app = App(outdir=tempfile.mkdtemp(), context=json.load(open("cdk.json"))["context"],
              builtin_cloud_formation_validation="builtin" in validation)
    builder.build(app, config.load())
else:
    app = App(outdir=tempfile.mkdtemp())
    Stack(app, "Empty")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
marks.append(("construct", cpu()))
app.synth()
marks.append(("synth", cpu()))
print(json.dumps([[name, round(b[0] - a[0], 2), round(b[1] - a[1], 2)] for (_, a), (name, b) in zip(marks, marks[1:])]))
"""


def phases(runs: int) -> list[tuple[str, str]]:
    """Where one in-process synth spends CPU (this Python process and the jsii kernel apart), min of ``runs``:
    the floor, the whole app with cdk-nag and aws-cdk-lib's built-in template validation (the user's path), and
    the same synth without them, which is what each costs."""
    def run(*args) -> list:
        result = terminal.run([sys.executable, "-c", PHASES, *args], cwd=ROOT, check=True, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        return json.loads(result.stdout.strip().splitlines()[-1])

    def best(*args) -> dict[str, tuple[float, float]]:
        samples = [run(*args) for _ in range(runs)]
        return {name: (min(s[i][1] for s in samples), min(s[i][2] for s in samples))
                for i, (name, _, _) in enumerate(samples[0])}

    floor, user, nag_only, neither = best("floor"), best("app", "nag+builtin"), best("app", "nag"), best("app", "none")
    rows = [(f"floor, {name}: Python / jsii kernel CPU", f"{p:.2f} / {k:.2f} s") for name, (p, k) in floor.items()]
    rows += [(f"whole app, {name}: Python / jsii kernel CPU", f"{p:.2f} / {k:.2f} s") for name, (p, k) in user.items()]
    synth_of = {label: sum(phase["synth"]) for label, phase in (("user", user), ("nag", nag_only), ("none", neither))}
    rows += [("whole app synth: templates without validation", f"{synth_of['none']:.2f} s"),
             ("whole app synth: cdk-nag", f"{synth_of['nag'] - synth_of['none']:.2f} s"),
             ("whole app synth: built-in template validation (engine start and 13 templates)",
              f"{synth_of['user'] - synth_of['nag']:.2f} s"),
             ("floor synth: cdk-nag and built-in validation (engine start, one empty template)",
              f"{sum(floor['synth']):.2f} s")]
    return rows


def test_files(root: Path = ROOT) -> list[Path]:
    """Every test file of the suite, as pytest collects them (pytest.ini's testpaths, test_*.py, without what its
    addopts ignore: tests/frameworks, the frameworks tier, which needs PyTorch and runs in .venv/frameworks)."""
    ignored = [root / arg.split("=", 1)[1] for arg in _ini_addopts(root) if arg.startswith("--ignore=")]
    return sorted(path for path in (root / "tests").rglob("test_*.py")
                  if "__pycache__" not in path.parts and not any(path.is_relative_to(folder) for folder in ignored))


def _ini_addopts(root: Path) -> list[str]:
    ini = configparser.ConfigParser()
    ini.read(root / "pytest.ini")
    return ini.get("pytest", "addopts", fallback="").split()


def file_seconds(files: list[Path], run=timed_tests) -> list[tuple[str, float, float, bool]]:
    """Each file run alone (a process of its own, as a developer runs one), one after another: (path, wall s,
    CPU s, passed)."""
    found = []
    with terminal.progress("running each test file alone", total=len(files)) as shown:
        for path in files:
            name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            shown.advance(name)
            found.append((name, *run([name])))
    return found


def file_rows(seconds: list[tuple[str, float, float, bool]], slowest: int) -> list[tuple[str, str]]:
    """The per-file rows: how many files, the slowest ``slowest`` with their wall / CPU times, every file over the
    target (a file whose tests failed is marked: its time is not a passing run's)."""
    def shown(name: str, wall: float, cpu: float, passed: bool) -> str:
        return f"`{name}` {wall:.1f} / {cpu:.1f} s" + ("" if passed else " (tests failed)")

    ranked = sorted(seconds, key=lambda item: -item[1])
    over = [item for item in ranked if item[1] >= FILE_TARGET_SECONDS]
    rows = [(f"test files run alone: {len(seconds)} files, slowest, wall / CPU (target < {FILE_TARGET_SECONDS} s "
             "each)", ", ".join(shown(*item) for item in ranked[:slowest]))]
    rows.append((f"files over {FILE_TARGET_SECONDS} s alone", ", ".join(shown(*item) for item in over) or "none"))
    if seconds:
        rows.append(("median file alone, wall / CPU", f"{statistics.median(item[1] for item in seconds):.1f} / "
                                                      f"{statistics.median(item[2] for item in seconds):.1f} s"))
    failed = [name for name, _, _, passed in seconds if not passed]
    if failed:
        rows.append(("files whose tests failed alone", ", ".join(f"`{name}`" for name in failed)))
    return rows


def parser() -> Parser:
    bench = Parser("./platform bench", description=__doc__)
    bench.add_argument("--runs", type=bounded(1, 20, "synth runs of each kind", example="--runs 3", integer=True),
                       default=5, help="synth runs of each kind, 1 to 20 (default 5)")
    bench.add_argument("--skip-synth", action="store_true", help="skip the synth measurements")
    bench.add_argument("--skip-suite", action="store_true", help="skip the whole test suite's timing")
    bench.add_argument("--skip-files", action="store_true", help="skip running each test file alone (minutes)")
    bench.add_argument("--skip-cold", action="store_true", help="skip the cold-setup measurement (several minutes)")
    bench.add_argument("--slowest", type=bounded(1, 50, "the slowest test files listed", example="--slowest 8",
                                                 integer=True), default=8, help="how many of the slowest files to list")
    return bench


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    load_before = os.getloadavg()
    rows: list[tuple[str, str]] = [(f"this machine's speed: {REFERENCE_LOOP:,} Python additions, CPU s (best of 3)",
                                    f"{reference_seconds():.2f} s")]
    if not args.skip_synth:
        rows += synth_rows(args.runs, scratch)
    if not args.skip_suite:
        with terminal.progress("running the whole test suite as ./platform test does (about 3 minutes)"):
            wall, cpu, passed = timed_tests(suite_arguments([]))
        rows.append((f"whole test suite, wall time (target < {SUITE_TARGET_SECONDS} s) / CPU",
                     f"{wall:.1f} / {cpu:.1f} s" + ("" if passed else " (tests failed)")))
    if not args.skip_files:
        rows += file_rows(file_seconds(test_files()), args.slowest)
    if not args.skip_synth:
        with terminal.progress("where one synth's time goes (in-process synths)"):
            rows += phases(min(args.runs, 3))
    if not args.skip_cold:
        clone = scratch / "clone"
        terminal.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPYCACHEPREFIX"))}
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
        env.update(PIP_NO_CACHE_DIR="1", npm_config_cache=str(scratch / "npm-cache"))
        with terminal.progress("cold setup of a fresh clone (several minutes)"):
            rows.append(("cold setup: fresh clone, no pip/npm cache (`./platform setup`)",
                         f"{timed(['./platform', 'setup'], cwd=clone, env=env):.0f} s"))
    rows.append(("load average (1 min) before / after, on " + f"{os.cpu_count()} cores",
                 f"{load_before[0]:.1f} / {os.getloadavg()[0]:.1f}"))
    shutil.rmtree(scratch, ignore_errors=True)
    print("| measurement | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


REFERENCE_LOOP = 20_000_000


def reference_seconds(count: int = REFERENCE_LOOP) -> float:
    """CPU seconds of a fixed pure-Python loop, best of 3: the same figures on two machines differ by their speed
    (the same test files have taken 1.5-2.2 times as long on one machine of this project as on another:
    docs/BENCHMARKS.md), so each run states it."""
    best = math.inf
    for _ in range(3):
        started = time.process_time()
        total = 0
        for number in range(count):
            total += number
        best = min(best, time.process_time() - started)
    return best


def synth_rows(runs: int, scratch: Path) -> list[tuple[str, str]]:
    full, floor, one = [], [], []
    with terminal.progress("synthesizing the floor, every environment and dev, interleaved", total=3 * runs) as shown:
        for run in range(runs):  # interleaved, so machine noise hits all alike
            shown.advance(f"run {run + 1}: the floor")
            floor.append(measured(synth(f"{sys.executable} bench/floor_app.py", str(scratch / f"floor{run}"))))
            shown.advance(f"run {run + 1}: every environment")
            full.append(measured(synth(None, str(scratch / f"full{run}"))))
            shown.advance(f"run {run + 1}: dev")
            one.append(measured(synth(None, str(scratch / f"dev{run}"), "dev")))

    def best(samples, index):
        return min(s[index] for s in samples)

    return [
        (f"`cdk synth '**'`, all environments: wall / CPU (min of {runs})",
         f"{best(full, 0):.1f} / {best(full, 1):.1f} s"),
        ("`cdk synth`, one empty stack, same validation (floor): wall / CPU", f"{best(floor, 0):.1f} / {best(floor, 1):.1f} s"),
        (f"ratio full / floor, wall / CPU (target <= {SYNTH_RATIO_TARGET})",
         f"{best(full, 0) / best(floor, 0):.2f} / {best(full, 1) / best(floor, 1):.2f}"),
        ("ratio full / floor of the medians, wall", f"{statistics.median(w for w, _ in full) / statistics.median(w for w, _ in floor):.2f}"),
        ("`./platform synth dev` (only the dev stage is built): wall / CPU", f"{best(one, 0):.1f} / {best(one, 1):.1f} s"),
        ("ratio dev / floor, wall / CPU", f"{best(one, 0) / best(floor, 0):.2f} / {best(one, 1) / best(floor, 1):.2f}"),
    ]


if __name__ == "__main__":
    terminal.entry_point(main)
