"""The construct library by domain (docs/ARCHITECTURE.md, "The library's map"): CDK-free folders that never reach the
CDK half, at any depth; no import circle; and 0.3's module paths still importable, with a warning naming the new one."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import ml_platform_constructs
from ml_platform_constructs._package import MOVED, REMOVED_IN, RUNTIME_MOVED, RUNTIME_REMOVED_IN

PACKAGE = Path(ml_platform_constructs.__file__).parent
CDK_FREE = ("advice", "operations", "runtime")
CDK_HALF = ("foundation", "data", "training", "serving", "governance")
CDK_DISTRIBUTIONS = ("aws_cdk", "constructs", "jsii", "cdk_nag")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function (a lazy import is still a dependency);
    what an ``if TYPE_CHECKING:`` block imports for type checkers is not."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
               for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module
            found.add(module)
            # `from . import x` and `from .advice import gpu_catalog` name modules too
            found |= {f"{module}.{alias.name}" for alias in node.names
                      if (PACKAGE.parent / f"{module}.{alias.name}".replace(".", "/")).with_suffix(".py").exists()}
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_top_of_the_package_holds_the_domains_and_nothing_else():
    top = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert top == sorted(["__init__.py", "__main__.py", "_package.py", "errors.py", "py.typed", *CDK_FREE, *CDK_HALF])


@pytest.mark.parametrize("folder", CDK_FREE)
def test_a_cdk_free_folder_imports_nothing_of_the_cdk_all_the_way_down(folder):
    offending = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        bad = sorted(m for m in imports(path) if m.split(".")[0] in CDK_DISTRIBUTIONS
                     or m.split(".")[:2] in [["ml_platform_constructs", half] for half in CDK_HALF])
        if bad:
            offending[module_name(path)] = bad
    assert offending == {}


def test_the_library_has_no_import_circle():
    graph = {module_name(path): {m for m in imports(path) if m.startswith("ml_platform_constructs")}
             for path in SOURCES}
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        if state.get(module) == "done" or module not in graph:
            return
        if state.get(module) == "open":
            raise AssertionError("import circle: " + " -> ".join([*trail[trail.index(module):], module]))
        state[module] = "open"
        for target in sorted(graph[module]):
            visit(target, [*trail, module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])


def test_the_cdk_free_folders_import_with_the_standard_library_and_boto3_alone():
    modules = [module_name(p) for folder in CDK_FREE for p in sorted((PACKAGE / folder).rglob("*.py"))]
    code = "; ".join(["import sys", *(f"import {m}" for m in modules),
                      "print(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])))"])
    result = subprocess.run([sys.executable, "-c", code, *CDK_DISTRIBUTIONS], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_module_path_of_0_3_still_imports_with_a_warning_naming_the_new_one(old):
    old_path = f"ml_platform_constructs.{old}"
    new_path = MOVED[old] if MOVED[old].startswith("ml_platform_job.") else f"ml_platform_constructs.{MOVED[old]}"
    sys.modules.pop(old_path, None)
    with pytest.warns(DeprecationWarning, match=rf"{old_path} moved to {new_path} in .*removed in {REMOVED_IN}"):
        module = importlib.import_module(old_path)
    assert module is importlib.import_module(new_path)  # the same module: its names and its state
    assert not (PACKAGE / f"{old}.py").exists()


@pytest.mark.parametrize("old", sorted(RUNTIME_MOVED))
def test_every_flat_runtime_path_of_0_12_is_gone_and_its_error_names_the_new_one(old):
    """The runtime room split by who runs the code (handlers, agents, decisions) in 0.13: the flat paths imported the
    same modules with a warning for that release; 0.14 removed them, as 0.13's CHANGELOG said."""
    old_path, new_path = f"ml_platform_constructs.{old}", f"ml_platform_constructs.{RUNTIME_MOVED[old]}"
    sys.modules.pop(old_path, None)
    with pytest.raises(ModuleNotFoundError, match=rf"^{old_path} moved to {new_path} in 0.13.0 and its old path was "
                                                  rf"removed in {RUNTIME_REMOVED_IN}: import {new_path}$"):
        importlib.import_module(old_path)
    assert importlib.import_module(new_path)
    assert not (PACKAGE / f"{old.replace('.', '/')}.py").exists()


def test_a_flat_runtime_module_as_an_attribute_or_run_with_python_m_fails_naming_the_new_path():
    """0.12 let ``ml_platform_constructs.runtime.promotion`` be read as an attribute once anything had imported it,
    and ``python -m ml_platform_constructs.runtime.interruption_watcher`` run the watcher; 0.13 kept both with a
    warning; 0.14 says where they went."""
    import ml_platform_constructs.runtime as runtime

    vars(runtime).pop("promotion", None)
    sys.modules.pop("ml_platform_constructs.runtime.promotion", None)  # as in a fresh process
    with pytest.raises(AttributeError, match=r"runtime.promotion moved to .*runtime.decisions.promotion in 0.13.0 and "
                                             r"its old path was removed in 0.14.0"):
        runtime.promotion
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        runtime.nothing
    result = subprocess.run([sys.executable, "-m", "ml_platform_constructs.runtime.interruption_watcher"],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert ("ml_platform_constructs.runtime.interruption_watcher moved to "
            "ml_platform_constructs.runtime.agents.interruption_watcher in 0.13.0") in result.stderr


def test_the_runtime_rooms_hold_every_runtime_module_and_the_changelog_names_each_move():
    rooms = {p.parent.name for p in (PACKAGE / "runtime").rglob("*.py") if p.name != "__init__.py"}
    assert rooms == {"handlers", "agents", "decisions"}
    assert not [p.name for p in (PACKAGE / "runtime").glob("*.py") if p.name != "__init__.py"]
    changelog = " ".join((PACKAGE.parent / "CHANGELOG.md").read_text().split())
    assert [old for old, new in RUNTIME_MOVED.items() if f"`{old}` → `{new}`" not in changelog] == []


def test_from_an_old_path_import_a_name_works():
    sys.modules.pop("ml_platform_constructs.spot_gpu_fleet", None)
    with pytest.warns(DeprecationWarning, match="training.spot_gpu_fleet"):
        from ml_platform_constructs.spot_gpu_fleet import SpotGpuFleet
    assert SpotGpuFleet is ml_platform_constructs.SpotGpuFleet


def test_the_paths_that_became_folders_still_export_their_names():
    from ml_platform_constructs.governance import ACCOUNT_SCOPE, BUDGET_SCOPE_TAG, govern
    from ml_platform_constructs.governance.scope import govern as scope_govern
    from ml_platform_constructs.operations import main, parser
    from ml_platform_constructs.operations.cli import main as cli_main

    assert (ACCOUNT_SCOPE, BUDGET_SCOPE_TAG) == ("account", "ml-platform:budget-scope")
    assert govern is scope_govern and main is cli_main and callable(parser)


@pytest.mark.parametrize("folder", [*CDK_HALF, *CDK_FREE[:2]])
def test_each_domain_folder_exports_what_it_says(folder):
    package = importlib.import_module(f"ml_platform_constructs.{folder}")
    assert package.__all__ and all(getattr(package, name) is not None for name in package.__all__)
    assert set(package.__all__) <= set(dir(package))


def test_the_changelog_names_every_moved_path():
    changelog = (PACKAGE.parent / "CHANGELOG.md").read_text()
    missing = [old for old, new in MOVED.items() if f"`ml_platform_constructs.{old}` → `"
               f"{new if new.startswith('ml_platform_job.') else 'ml_platform_constructs.' + new}`" not in changelog]
    assert missing == []
