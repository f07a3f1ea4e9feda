"""The emulator starts (moto as dev's account, bootstrapped by the CDK CLI) in a thread as soon as the session
knows it will run these tests, so its seconds overlap the tests before them; the module's fixture waits for it."""

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from ops.local.deploy import LocalEmulator
from stacks import config as platform_config
from tests.conftest import XDIST_WORKER


def pytest_collection_finish(session):
    if not XDIST_WORKER and any(Path(__file__).parent in item.path.parents for item in session.items):
        start(session.config)


def start(config) -> tuple:
    """Starts the emulator in a thread, unless started; returns (emulator, its start's future, pool, logs). Under
    pytest-xdist, the module that deploys to it starts it (tests/conftest.py, XDIST_WORKER)."""
    if getattr(config, "local_emulator", None) is None:
        logs = Path(tempfile.mkdtemp(prefix="emulator-logs-"))
        emulator = LocalEmulator(platform_config.load().environments["dev"], logs)
        pool = ThreadPoolExecutor(max_workers=1)
        config.local_emulator = (emulator, pool.submit(emulator.start), pool, logs)
    return config.local_emulator


def stop(config) -> None:
    started = getattr(config, "local_emulator", None)
    if started:
        emulator, starting, pool, logs = started
        wait([starting])
        emulator.stop()
        pool.shutdown()
        shutil.rmtree(logs, ignore_errors=True)
        config.local_emulator = None


def pytest_sessionfinish(session):
    stop(session.config)  # when the module's fixture never ran (its tests deselected or the session stopped)
