"""What every operator command shares on the terminal: Ctrl-C, the processes it starts, and progress.

    if __name__ == "__main__":
        entry_point(main)                    # Ctrl-C (or SIGTERM): one line, exit 130 (143), nothing left running

    result = run([...], stdout=PIPE)         # a child process in its own process group, ended with its group on
    process = start([...]); ...; stop(process)   # an interrupt or any error: the CDK CLI's node, its app and the
                                                 # app's jsii kernel, moto, checkov, pytest
    with progress("synthesizing dev"):       # a spinner with the seconds on a terminal; plain lines otherwise (CI)
        ...
    pytest_main()                            # ./platform test: pytest, whose Ctrl-C is the same one line and 130

A child runs in a session of its own, so the terminal's Ctrl-C reaches only this process: the child's tracebacks
never reach the screen, and this process ends the child's whole group itself (SIGTERM, then SIGKILL after a grace
period) before it reports the interrupt.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence, TextIO

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C
TERMINATED_EXIT = 143  # 128 + SIGTERM
GRACE_SECONDS = 5.0

_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
interrupted = threading.Event()  # set by the first SIGINT or SIGTERM; the command is ending
_signal_received: list[int] = []
_main_running = threading.Event()  # entry_point has called main: an interrupt unwinds it; before, it just exits


def start(command: Sequence[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen`` in its own session (process group), known to the interrupt handler, which ends its
    whole group. A caller that neither waits for it through ``run`` nor calls ``stop`` calls ``forget`` once it has
    ended."""
    if interrupted.is_set():
        raise KeyboardInterrupt
    process = subprocess.Popen(list(command), start_new_session=True, **popen)
    with _children_lock:
        _children.add(process)
    return process


def forget(process: subprocess.Popen) -> None:
    with _children_lock:
        _children.discard(process)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # the group outlives its leader while a grandchild is in it
    except (ProcessLookupError, PermissionError):
        pass


def stop(process: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """Ends the child's process group: SIGTERM, then SIGKILL for whatever is still there after ``grace`` seconds."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process, signal.SIGKILL)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    forget(process)


def kill(process: subprocess.Popen) -> None:
    """Ends the child's process group at once (SIGKILL), for a child with nothing to save or flush."""
    _signal_group(process, signal.SIGKILL)
    process.wait()
    forget(process)


def stop_all(grace: float = GRACE_SECONDS) -> None:
    with _children_lock:
        children = list(_children)
    for process in children:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in children:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        _signal_group(process, signal.SIGKILL)
        forget(process)


def run(command: Sequence[str], *, input: Optional[str] = None, timeout: Optional[float] = None,
        check: bool = False, **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` through ``start``: on an interrupt, a timeout or any other error the child's group is
    ended before the error goes on."""
    if popen.pop("capture_output", False):
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen.setdefault("stdin", subprocess.PIPE)
    process = start(command, **popen)
    try:
        stdout, stderr = process.communicate(input, timeout=timeout)
    except BaseException:
        stop(process)
        raise
    forget(process)
    if interrupted.is_set():  # ended by the handler: its exit status says nothing about the command
        raise KeyboardInterrupt
    result = subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


class _MainThreadOnly:
    """A stream that, once the command is interrupted, takes writes from the main thread only: what other threads
    would still relay (the jsii kernel's stderr, where the terminal's Ctrl-C made its Node.js wrapper print a
    traceback) is dropped, so the interrupt's line is the last one."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: Any) -> int:
        if threading.current_thread() is threading.main_thread():
            return self._stream.write(data)
        return len(data)

    @property
    def buffer(self) -> Any:
        return _MainThreadOnly(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _on_signal(signum: int, frame: Any) -> None:
    """The first SIGINT or SIGTERM: every child's group gets SIGTERM at once (so a finally that waits for one ends
    soon), further signals are ignored while the command cleans up, other threads' output is muted, and
    KeyboardInterrupt unwinds the main thread."""
    if interrupted.is_set():
        return
    _signal_received.append(signum)
    interrupted.set()
    sys.stdout, sys.stderr = _MainThreadOnly(sys.stdout), _MainThreadOnly(sys.stderr)
    if not _main_running.is_set():  # still loading the command's modules: nothing of its own to unwind
        _exit_interrupted()
    for name in ("SIGINT", "SIGTERM"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    with _children_lock:
        children = list(_children)
    for process in children:
        _signal_group(process, signal.SIGTERM)
    raise KeyboardInterrupt


def install_handlers() -> None:
    """From the start of a command (ops/__init__.py does it for python -m ops.<command>, before the command's
    modules load: aws-cdk-lib's import alone takes a second), Ctrl-C and SIGTERM end it with one line."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def interrupted_line() -> str:
    how = "SIGTERM" if _signal_received[-1:] == [signal.SIGTERM] else "Ctrl-C"
    return f"interrupted ({how}): stopped, and nothing it started is left running; run the command again to start over"


def entry_point(main: Callable[[list[str]], int], argv: Optional[list[str]] = None) -> NoReturn:
    """Runs ``main(argv)`` (default: the command line) as a command: its exit status, its one-line errors; on Ctrl-C
    or SIGTERM, whatever it was doing, the processes it started are ended, one line says so, and it exits 130 (143).
    It exits without Python's exit handlers then, which would only report on what the interrupt already ended (the
    jsii kernel's closed pipe)."""
    install_handlers()
    _main_running.set()
    try:
        code = main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()  # here, where a reader that stopped reading is told apart (below), not at the exit
    except BrokenPipeError:
        _exit_reader_gone()
    except BaseException as error:  # noqa: B902 - an interrupt shows as whatever it broke
        if not interrupted.is_set() and not isinstance(error, KeyboardInterrupt):
            raise
        _exit_interrupted()
    sys.exit(code)


def _exit_reader_gone() -> NoReturn:
    """The reader of the output closed it (``| head -1``): no traceback, and nothing more written to the pipe (the
    interpreter's own flush at exit would fail again: standard output goes to /dev/null, as Python's signal docs
    advise, https://docs.python.org/3/library/signal.html#note-on-sigpipe); the exit status a process killed by
    SIGPIPE has, 141."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


def _exit_interrupted() -> NoReturn:
    for name in ("SIGINT", "SIGTERM"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    if not _signal_received:
        _signal_received.append(signal.SIGINT)  # a KeyboardInterrupt without the handler: Ctrl-C all the same
    stop_all()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        os.write(2, (_CLEAR if _spinning.is_set() else b"") + (interrupted_line() + "\n").encode())
    except OSError:
        pass
    os._exit(TERMINATED_EXIT if _signal_received[-1:] == [signal.SIGTERM] else INTERRUPTED_EXIT)


# --- progress ---------------------------------------------------------------------------------------------------

_CLEAR = b"\r\033[K"
_spinning = threading.Event()
HEARTBEAT_SECONDS = 30.0


def on_terminal(stream: TextIO) -> bool:
    """Whether progress may redraw a line: a terminal that is not dumb, outside CI."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM", "") != "dumb" and not os.environ.get("CI")


class Progress:
    """One long step: on a terminal a spinner, the count and the seconds so far, redrawn on one line of stderr and
    cleared at the end; elsewhere (CI, a pipe, a log) plain lines: one when the step starts (unless the caller has
    said already what it does), one per item counted, and a line every ``heartbeat`` seconds of a silent step."""

    def __init__(self, what: str, *, total: Optional[int] = None, stream: Optional[TextIO] = None,
                 announce: bool = True, heartbeat: float = HEARTBEAT_SECONDS, interval: float = 0.1) -> None:
        self.what, self.total, self.count, self.item = what, total, 0, ""
        self.stream = stream or sys.stderr
        self.terminal = on_terminal(self.stream)
        self.announce, self.heartbeat, self.interval = announce, heartbeat, interval
        self.started = time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def __enter__(self) -> "Progress":
        self.started = time.monotonic()
        if self.terminal:
            _spinning.set()
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        else:
            if self.announce:
                self._line(f"{self.what} ...")
            if self.heartbeat:
                self._thread = threading.Thread(target=self._beat, daemon=True)
                self._thread.start()
        return self

    def advance(self, item: str = "") -> None:
        """One more item done (or begun: ``item`` names it)."""
        with self._lock:
            self.count += 1
            self.item = item
        if not self.terminal:
            of = f"/{self.total}" if self.total else ""
            self._line(f"  [{self.count}{of}] {item}".rstrip())

    def __exit__(self, *exc_info: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self.terminal:
            self._write(_CLEAR.decode())
            _spinning.clear()

    def status(self, frame: str) -> str:
        with self._lock:
            count = f" [{self.count}/{self.total}]" if self.total else (f" [{self.count}]" if self.count else "")
            item = f" {self.item}" if self.item else ""
        text = f"{frame} {self.what}{count}{item} ({self.seconds():.0f} s)"
        width = shutil.get_terminal_size((100, 24)).columns - 1
        return text if len(text) <= width else text[:max(0, width - 3)] + "..."

    def _spin(self) -> None:
        for frame in itertools.cycle("|/-\\"):
            self._write("\r\033[K" + self.status(frame))
            if self._done.wait(self.interval):
                return

    def _beat(self) -> None:
        while not self._done.wait(self.heartbeat):
            self._line(f"  ... still {self.what} ({self.seconds():.0f} s)")

    def _line(self, text: str) -> None:
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass


@contextmanager
def progress(what: str, **options: Any) -> Iterator[Progress]:
    with Progress(what, **options) as shown:
        yield shown


# --- ./platform test ------------------------------------------------------------------------------------------------

# ./platform test's default: pytest-xdist, one worker per core (at most 4: each may synthesize the whole app), each test
# file whole on one worker (its module fixtures run once), the files in the order tests/conftest.py puts them.
PARALLEL = ["-n", "auto", "--maxprocesses", "4", "--dist", "loadfile", "--no-loadscope-reorder"]


def suite_arguments(args: list[str]) -> list[str]:
    """pytest's arguments for ./platform test ARGS: PARALLEL first, unless ARGS choose the workers themselves (-n,
    --numprocesses, --dist, -p no:xdist) or name one test file and no folder (the developer's loop: one file runs
    whole on one worker anyway, and the workers' start would be its time twice over)."""
    chosen = any(arg in ("no:xdist", "-pno:xdist") or arg.startswith(("--numprocesses", "--dist")) or
                 (arg.startswith("-n") and not arg.startswith("--")) for arg in args)
    files = {arg.split("::", 1)[0] for arg in args if arg.split("::", 1)[0].endswith(".py")}
    folders = [arg for arg in args if not arg.startswith("-") and os.path.isdir(arg)]
    return list(args) if chosen or (len(files) == 1 and not folders) else [*PARALLEL, *args]


def pytest_main(argv: Optional[list[str]] = None) -> NoReturn:
    """./platform test: pytest in this process, ended by Ctrl-C as every command is. pytest still ends its session as
    it would (every fixture torn down: moto, the emulator, the background scans), but what it would print from the
    interrupt on (its KeyboardInterrupt section with the test's line, its summary) goes to /dev/null, a second Ctrl-C
    is ignored while it cleans up, and one line says the command was interrupted: exit 130. A Ctrl-C before the
    session (pytest's import, conftest.py's) is the same line. SIGTERM keeps its default: tests install SIGTERM
    handlers of their own, which call the one before them (./platform runs this with ``python -c``, not ``-m``, for
    that: ops/__init__.py would install this module's)."""
    args = suite_arguments(sys.argv[1:] if argv is None else argv)
    sys.argv[0] = "./platform test"  # pytest's usage line names it (basename: "platform test"), not "-c"
    stderr = os.dup(2)  # the interrupt's line goes here once 1 and 2 lead to /dev/null (not inherited by children)
    code = 0
    try:
        import pytest

        code = int(pytest.main(args, plugins=[_quiet_interrupt(pytest)]))
        sys.stdout.flush()
    except BrokenPipeError:
        _exit_reader_gone()
    except KeyboardInterrupt:
        _mute()
    if _muted.is_set():
        stop_all()
        try:
            os.write(stderr, (interrupted_line() + "\n").encode())
        except OSError:
            pass
        os._exit(INTERRUPTED_EXIT)  # Python's exit handlers would only report on what the interrupt ended
    sys.exit(code)


def _quiet_interrupt(pytest: Any) -> object:
    """pytest_main's plugin: on pytest's KeyboardInterrupt, standard output and error go to /dev/null (after the
    capture plugin's hook, which puts them back and so would undo it)."""

    class QuietInterrupt:
        def __init__(self) -> None:
            self.config: Any = None

        def pytest_configure(self, config: Any) -> None:
            self.config = config

        @pytest.hookimpl(trylast=True)
        def pytest_keyboard_interrupt(self) -> None:
            _mute(self.config.pluginmanager.get_plugin("terminalreporter") if self.config else None)

    return QuietInterrupt()


_muted = threading.Event()  # pytest_main's: the interrupt came (not ``interrupted``, which would make start and run
                            # refuse to work in the fixtures' teardown that follows)


def _mute(reporter: Any = None) -> None:
    """The interrupt has come: later Ctrl-Cs are ignored, the line pytest was writing ends, and everything written to
    standard output and error from now on (by pytest, a fixture's teardown, a thread) goes to /dev/null."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _muted.set()
    try:
        writer = reporter._tw  # pytest's TerminalWriter: the line it was writing ("tests/unit/test_x.py ..") ends
        if writer.width_of_current_line:
            writer.line()
        writer.flush()
    except (AttributeError, OSError, ValueError):
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
