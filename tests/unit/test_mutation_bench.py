"""bench/mutation.py (a benchmark, not run here): every module it mutates and every test file it runs exist, and its
pytest plugin leaves out exactly the tests that synthesize the whole app."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("mutation_bench", ROOT / "bench" / "mutation.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_module_and_test_file_named_exists():
    for module, tests in bench.MODULES.items():
        source = ROOT / module.replace("ml_platform_constructs/", "constructs/ml_platform_constructs/", 1).replace(
            "ml_platform_job/", "job/ml_platform_job/", 1)
        assert source.is_file(), module
        for test in tests:
            assert (ROOT / "tests" / "unit" / test).is_file(), (module, test)


def test_the_plugin_leaves_out_the_whole_app_tests_only():
    plugin = {}
    exec(bench.PLUGIN, plugin)  # noqa: S102 (the plugin's own source, as mutmut's pytest loads it)
    items = [SimpleNamespace(nodeid="t.py::unit", fixturenames=["synth_stack"]),
             SimpleNamespace(nodeid="t.py::app", fixturenames=["templates"]),
             SimpleNamespace(nodeid="t.py::keys[whole-app]", fixturenames=["keys"]),
             SimpleNamespace(nodeid="t.py::keys[alone]", fixturenames=["keys"])]
    deselected = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    plugin["pytest_collection_modifyitems"](config, items)
    assert [i.nodeid for i in items] == ["t.py::unit", "t.py::keys[alone]"]
    assert [i.nodeid for i in deselected] == ["t.py::app", "t.py::keys[whole-app]"]
