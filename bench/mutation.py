"""Mutation testing (a benchmark, not a CI step): how many small breaks of the code the tests notice.

Usage: ./platform bench mutation [MODULE...] [--list] [--sample N] [--keep]

mutmut (pinned in bench/requirements-mutation.txt, installed into .venv on first use) changes one thing at a time
(an operator, a constant, a string, a call's argument) in each MODULE and runs the tests that reach the changed
function; a mutant the tests pass on survived. Each module runs with its own tests (MODULES below), so one module
takes minutes, not the whole suite per mutant. Tests that synthesize the whole app (the platform_app fixture and
parameters named whole-app: a minute each) are left out, and so are tests that reach the code only through a
subprocess (mutmut records which tests reach a function in this process): the score is what the module's own tests
notice.

Each module runs in build/mutation/<module>/ (a copy of the repository laid out so that the import names are the
file paths, as mutmut needs); the copy stays for `mutmut show NAME` there when --keep is given. Prints a Markdown
table and every survivor's diff, for docs/BENCHMARKS.md. Runs at a nice level, one mutant at a time (the tests share
the jsii kernel's node process), on an even sample of at most --sample mutants a module (mutmut makes about three
mutants a line; the moto-backed tests take seconds each): the score of a sample of 150 is within about 5 points.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as bench/mutation.py: the app's modules by their names
from ops import terminal  # noqa: E402
from ops.cli import Parser, bounded  # noqa: E402

WORK = ROOT / "build" / "mutation"
PACKAGE = ROOT / "constructs" / "ml_platform_constructs"
JOB_PACKAGE = ROOT / "job" / "ml_platform_job"
# What the tests need beside the code (copied into each work folder).
COPIED = ("stacks", "config", "examples", "tests", "cdk.json", "pytest.ini", "app.py", "bench")

# Module (its path in the work folder: the import name) -> the test files that exercise it.
MODULES: dict[str, tuple[str, ...]] = {
    "ml_platform_constructs/runtime/handlers/budget_guard.py": (
        "test_budget_guard_runtime.py", "test_budget_guard_queues.py", "test_budget_guard_joins.py",
        "test_budget_ops.py"),
    "ml_platform_constructs/runtime/handlers/pending_jobs.py": (
        "test_pending_jobs.py", "test_budget_guard_queues.py", "test_retrain.py", "test_budget_ops.py"),
    "ml_platform_constructs/runtime/handlers/retrain.py": ("test_retrain.py", "test_retrain_claims.py"),
    "ml_platform_constructs/runtime/agents/interruption_watcher.py": ("test_interruption_watcher.py",
                                                               "test_interruption_watcher_loop.py"),
    "ml_platform_constructs/runtime/handlers/scale_to_zero.py": ("test_scale_to_zero_handler.py", "test_spot_gpu_fleet.py"),
    "ml_platform_constructs/runtime/decisions/drift.py": (
        "test_runtime_maths.py", "test_drift.py", "test_drift_handler.py", "test_feature_watch.py"),
    "ml_platform_constructs/runtime/handlers/drift_handler.py": (
        "test_drift_metrics.py", "test_drift_handler.py", "test_feature_watch.py"),
    "ml_platform_job/benchmark.py": ("test_runtime_maths.py", "test_benchmark.py"),
    "ml_platform_constructs/operations/jobs.py": ("test_library_jobs.py", "test_job_commands.py"),
    "ops/job.py": ("test_job_ops.py", "test_job_ops_commands.py"),
    "ops/cost_estimate.py": ("test_cost_estimate.py", "test_cost_estimate_lines.py"),
    "ml_platform_constructs/advice/advisor.py": ("test_advisor.py", "test_advise_command.py"),
    "ml_platform_constructs/governance/budget_guard.py": (
        "test_budget_guard.py", "test_guard_iam.py", "test_budget_guard_wiring.py"),
    "ml_platform_constructs/training/training_queue.py": ("test_training_queue.py",),
    "ml_platform_constructs/training/queue_compute.py": ("test_training_queue.py",),
    "ml_platform_constructs/training/queue_jobs.py": (
        "test_queue_job_definition.py", "test_training_queue.py", "test_reclaim_retry.py"),
    "ml_platform_constructs/training/queue_monitoring.py": ("test_training_queue.py",),
}

# Leaves out the tests that need the whole app's synth (pytest plugin, copied into each work folder): by their
# fixtures, or by the id "whole-app" where a parametrized fixture asks for them.
PLUGIN = '''
import pytest

WHOLE_APP = {"platform_app", "templates", "checkov_scan", "cfn_lint_scan"}
_reached = {}  # test file -> the functions its tests have reached so far


def pytest_collection_modifyitems(config, items):
    kept = [item for item in items if not WHOLE_APP & set(getattr(item, "fixturenames", ()))
            and "whole-app" not in item.nodeid]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """A module-scoped fixture (a synthesized template) reaches the code during the first test that asks for it only:
    each test is taken to reach what the tests of its file before it reached, so that a mutant there runs them all."""
    try:
        from mutmut.state import state
    except ImportError:
        return
    reached = _reached.setdefault(item.nodeid.split("::")[0], set())
    reached |= state()._stats
    state()._stats |= reached
'''


def ensure_mutmut() -> Path:
    tool = Path(sys.executable).parent / "mutmut"
    if not tool.exists():
        print("==> installing mutmut into .venv (bench/requirements-mutation.txt)", file=sys.stderr)
        terminal.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                      "-r", ROOT / "bench" / "requirements-mutation.txt", "-c", ROOT / "constraints.txt"], check=True)
    return tool


def prepare(module: str, tests: tuple[str, ...]) -> Path:
    """A work folder where the module's file path is its import name (mutmut's rule) and the tests run unchanged."""
    work = WORK / module.replace("/", ".").removesuffix(".py")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "cdk.out*")
    shutil.copytree(PACKAGE, work / "ml_platform_constructs", ignore=ignore)
    shutil.copytree(JOB_PACKAGE, work / "ml_platform_job", ignore=ignore)
    shutil.copytree(ROOT / "ops", work / "ops", ignore=ignore)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, work / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, work / name)
    (work / "mutation_plugin.py").write_text(PLUGIN)
    # Exists before mutmut starts: on PYTHONPATH (for the tests' subprocesses), a folder missing at start-up is
    # cached as absent and never searched.
    (work / "mutants").mkdir()
    lines = lambda values: "".join(f"\n    {v}" for v in values)  # noqa: E731
    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        f"source_paths ={lines(['ml_platform_constructs', 'ops'])}\n"
        f"only_mutate ={lines([module])}\n"
        f"also_copy ={lines([*COPIED, 'mutation_plugin.py'])}\n"
        f"pytest_add_cli_args_test_selection ={lines(f'tests/unit/{t}' for t in tests)}\n"
        f"pytest_add_cli_args ={lines(['-p', 'mutation_plugin', '-p', 'no:cacheprovider'])}\n"
        # Mutants fork from a server that imported the tests once (the jsii kernel's node process included, which
        # mutmut's plain fork mode would take for a finished mutant).
        "process_isolation = forkserver\n")
    return work


def results(work: Path, module: str) -> dict[str, str]:
    from mutmut.stats import status_by_exit_code  # installed by ensure_mutmut

    meta = json.loads((work / "mutants" / (module + ".meta")).read_text())
    return {name: status_by_exit_code[code] for name, code in meta["exit_code_by_key"].items()}


def diff(tool: Path, work: Path, name: str) -> str:
    shown = terminal.run([tool, "show", name], cwd=work, capture_output=True, text=True).stdout
    return "\n".join(line for line in shown.splitlines()
                     if line.startswith(("-", "+")) and not line.startswith(("---", "+++")))


def mutmut(tool: Path, work: Path, args: list[str], log: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(work / "mutants"), "PYTHONDONTWRITEBYTECODE": "1"}
    with log.open("a") as out:
        return terminal.run(["nice", "-n", "10", tool, "run", *args], cwd=work, env=env, stdout=out,
                            stderr=subprocess.STDOUT).returncode


def run(tool: Path, module: str, tests: tuple[str, ...], sample: int, keep: bool) -> dict:
    work = prepare(module, tests)
    started = time.perf_counter()
    log = work / "mutmut.log"
    meta = work / "mutants" / (module + ".meta")
    # First only the mutants and which tests reach each function (a name that matches no mutant stops it there).
    mutmut(tool, work, ["--max-children", "1", "no-such-mutant"], log)
    if not meta.exists():  # once under heavy load a mutated file came out empty: make it again
        (work / "mutants" / module).unlink(missing_ok=True)
        shutil.copy2(work / module, work / "mutants" / module)
        mutmut(tool, work, ["--max-children", "1", "no-such-mutant"], log)
    if not meta.exists():
        return {"module": module, "error": f"mutmut made no mutants: see {log}", "seconds": time.perf_counter() - started}
    names = sorted(json.loads(meta.read_text())["exit_code_by_key"])
    # Every k-th mutant, in the order of the file's functions: an even sample where a module has more than `sample`.
    chosen = names[::max(1, -(-len(names) // sample))] if sample else names
    # One mutant at a time: the tests share the jsii kernel's node process the fork server started.
    code = mutmut(tool, work, ["--max-children", "1", *chosen], log)
    seconds = time.perf_counter() - started
    if code != 0:
        return {"module": module, "error": f"mutmut exited {code}: see {log}", "seconds": seconds}
    found = {name: status for name, status in results(work, module).items() if name in chosen}
    survivors = {name: diff(tool, work, name) for name, status in sorted(found.items()) if status != "killed"}
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    counts: dict[str, int] = {}
    for status in found.values():
        counts[status] = counts.get(status, 0) + 1
    return {"module": module, "seconds": seconds, "counts": counts, "total": len(found), "generated": len(names),
            "survivors": {name: (found[name], text) for name, text in survivors.items()}}


def report(outcomes: list[dict]) -> str:
    out = ["| module | mutants run (of) | killed | survived | no tests | timeout | other | score | minutes |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for o in outcomes:
        if "error" in o:
            out.append(f"| {o['module']} | {o['error']} | | | | | | | {o['seconds'] / 60:.1f} |")
            continue
        c = o["counts"]
        known = sum(c.get(k, 0) for k in ("killed", "survived", "no tests", "timeout"))
        # A timeout is a mutant the tests stopped (an endless loop): counted as killed, as mutmut does.
        killed = c.get("killed", 0) + c.get("timeout", 0)
        out.append(f"| {o['module']} | {o['total']} ({o['generated']}) | {c.get('killed', 0)} | {c.get('survived', 0)} | "
                   f"{c.get('no tests', 0)} | {c.get('timeout', 0)} | {o['total'] - known} | "
                   f"{killed / o['total']:.0%} | {o['seconds'] / 60:.1f} |")
    for o in outcomes:
        for name, (status, text) in o.get("survivors", {}).items():
            out.append(f"\n{status}: {name}\n```diff\n{text}\n```")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = Parser("./platform bench mutation", description=__doc__)
    parser.add_argument("modules", nargs="*", help="module paths as in --list (default: all)")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    parser.add_argument("--sample", type=bounded(0, 100_000, "mutants a module (0: all of them)", example="--sample 150",
                                                 integer=True), default=150, metavar="N",
                        help="at most N mutants a module, evenly spread (default 150; 0: all of them)")
    parser.add_argument("--keep", action="store_true", help="keep build/mutation/<module>/ for `mutmut show`")
    parser.add_argument("--json", type=Path, help="also write the outcomes to this file")
    args = parser.parse_args(argv)
    if args.list:
        for module, tests in MODULES.items():
            print(f"{module}: {', '.join(tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module {unknown[0]!r}: one of --list")
    tool = ensure_mutmut()
    outcomes = []
    chosen = args.modules or list(MODULES)
    with terminal.progress("mutation testing, module by module (minutes each)", total=len(chosen)) as shown:
        for module in chosen:
            shown.advance(module)
            outcomes.append(run(tool, module, MODULES[module], args.sample, args.keep))
            if args.json:
                args.json.write_text(json.dumps(outcomes, indent=1))
    print(report(outcomes))
    return 0 if all("error" not in o for o in outcomes) else 1


if __name__ == "__main__":
    terminal.entry_point(main)
