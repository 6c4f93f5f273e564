# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Start, watch and stop the processes of a launch plan (POSIX only).

Follows ``launch``'s ExecuteProcess behaviour as ``ros2 launch`` shows it:

* items start in plan order, each when its delay (``<timer>``) has passed:
  processes, ``<log>`` messages (``[INFO] [launch.user]: ...``) and
  ``<shutdown>`` requests;
* every output line is prefixed with ``[<label>]``; where it goes follows the
  process's ``output`` (launch.logging's aliases): ``screen`` both streams to
  the screen; ``log`` (the default) both to the launch log file and stderr
  also to the screen; ``both`` screen and log file; ``own_log`` both streams to
  ``<label>-stdout.log``, ``<label>-stderr.log`` and ``<label>.log``; ``full``
  all of these. The screen is stdout, as upstream's screen handler. The
  launch log file is ``launch.log`` in a folder per launch under
  ``$ROS_LOG_DIR`` (else ``$ROS_HOME/log``, else ``~/.ros/log``), with a
  ``latest`` link, and also gets the runner's own messages;
* ``emulate_tty`` gives the process a pseudo-terminal for stdout and stderr;
* shutdown sends SIGINT, then SIGTERM after ``sigterm_timeout`` (default 5 s),
  then SIGKILL after ``sigkill_timeout`` (default 5 s);
* ``on_exit="shutdown"`` ends the launch when that process exits;
  ``respawn`` restarts a process after ``respawn_delay`` seconds, at most
  ``respawn_max_retries`` times (-1: forever).

Choices of this runner (upstream has no exit-code contract):

* return value: 0 after a user shutdown (SIGINT/SIGTERM to the runner); the
  exit code of an ``on_exit="shutdown"`` process that ended the launch
  (128+N when killed by signal N); 1 when a process could not be started;
  otherwise 0 if every process exited 0, else 1;
* each child runs in its own session/process group and signals go to the
  whole group; when a child exits, what is left of its group is killed, so
  nothing is orphaned. A second SIGINT/SIGTERM skips to the next signal;
* children get ``PYTHONUNBUFFERED=1`` so Python output is not held back;
* ``<timer>`` items not yet due when the launch shuts down are dropped
  (cancel_on_shutdown, upstream's default);
* a process that ends the launch is never respawned.

The loop is single-threaded: one selector watches every pipe plus a wake-up
pipe written by the signal handler, and exits are polled every 50 ms.
"""

from __future__ import annotations

import itertools
import os
import pty
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from .model import LogMessage, PlanItem, ProcessSpec, ShutdownRequest

_POLL_INTERVAL = 0.05
_MAX_LINE = 65536
# launch.logging's output aliases -> destinations of (stdout, stderr): screen, log (launch.log), own.
_ROUTES = {
    "screen": ({"screen"}, {"screen"}),
    "log": ({"log"}, {"log", "screen"}),
    "both": ({"log", "screen"}, {"log", "screen"}),
    "own_log": ({"own"}, {"own"}),
    "full": ({"screen", "log", "own"}, {"screen", "log", "own"}),
}


def _exit_status(returncode: int) -> int:
    """Shell convention: a child killed by signal N is reported as 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class _Managed:
    """Runtime state of one ProcessSpec (across respawns)."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.popen: subprocess.Popen | None = None
        self.starts = 0
        self.returncode: int | None = None
        self.respawn_at: float | None = None
        # Shutdown escalation: 0 nothing sent, 1 SIGINT, 2 SIGTERM, 3 SIGKILL.
        self.stage = 0
        self.deadline: float | None = None
        self.partial: dict[int, bytes] = {}
        self.streams: dict[int, bool] = {}  # open read fds -> is stderr
        self.own_logs: dict[str, IO[str]] = {}


class Supervisor:
    """Runs the items of a plan until they are done or shut down."""

    def __init__(
        self, items: Sequence[PlanItem], *, stdout: IO[str] | None = None, log_dir: Path | None = None
    ) -> None:
        self._pending: list[PlanItem] = list(items)  # in plan order; delays never decrease
        self._procs: list[_Managed] = []
        self._managed = {id(item): _Managed(item) for item in items if isinstance(item, ProcessSpec)}
        self._stdout = stdout
        self._log_dir = log_dir
        self._launch_log: IO[str] | None = None
        self._t0 = 0.0
        # Created by run(), so a Supervisor that never runs holds no descriptors.
        self._selector: selectors.BaseSelector | None = None
        self._wake_w: int | None = None
        self._stop_requests = 0  # written by signal handlers / other threads
        self._stops_handled = 0
        self._shutting_down = False
        self._user_shutdown = False
        self._exit_code: int | None = None  # set by the cause that ended the launch

    @property
    def _sel(self) -> selectors.BaseSelector:
        assert self._selector is not None, "only valid while run() is running"
        return self._selector

    # ---- output -------------------------------------------------------------

    def _screen(self) -> IO[str]:
        # Looked up late so pytest's capsys (which swaps sys.stdout) sees output.
        return self._stdout or sys.stdout

    def _write(self, stream: IO[str] | None, text: str) -> None:
        if stream is None:
            return
        try:
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):  # reader went away / stream closed
            pass

    def _log(self, level: str, who: str, message: str) -> None:
        text = f"[{level}] [{who}]: {message}\n"
        self._write(self._screen(), text)
        self._write(self._launch_log, f"{time.time():.7f} {text}")

    def _own_log(self, proc: _Managed, name: str) -> IO[str] | None:
        if self._log_dir is None:
            return None
        if name not in proc.own_logs:
            proc.own_logs[name] = open(self._log_dir / name, "a", encoding="utf-8")
        return proc.own_logs[name]

    def _emit(self, proc: _Managed, is_err: bool, line: bytes) -> None:
        text = f"[{proc.spec.label}] {line.decode('utf-8', errors='replace').rstrip(chr(13))}\n"
        routes = _ROUTES[proc.spec.output][is_err]
        if "screen" in routes:
            self._write(self._screen(), text)
        if "log" in routes:
            self._write(self._launch_log, f"{time.time():.7f} {text}")
        if "own" in routes:
            label = proc.spec.label
            self._write(self._own_log(proc, f"{label}-{'stderr' if is_err else 'stdout'}.log"), text)
            self._write(self._own_log(proc, f"{label}.log"), text)

    def _read(self, proc: _Managed, fd: int, is_err: bool, *, drain: bool = False) -> bool:
        """Forward what is available on *fd*; False once it reached EOF.

        Reads a bounded amount unless *drain*, so one chatty process cannot
        starve the others (the selector calls back while data is left).
        A pseudo-terminal whose child is gone reads as EIO: that is EOF too.
        """
        for _ in itertools.count() if drain else range(16):
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                chunk = b""
            buffered = proc.partial.get(fd, b"") + chunk
            *lines, rest = buffered.split(b"\n")
            for line in lines:
                self._emit(proc, is_err, line)
            if not chunk or len(rest) > _MAX_LINE:
                if rest:
                    self._emit(proc, is_err, rest)
                rest = b""
            proc.partial[fd] = rest
            if not chunk:
                return False
        return True

    def _close_streams(self, proc: _Managed) -> None:
        for fd, is_err in list(proc.streams.items()):
            self._read(proc, fd, is_err, drain=True)  # whatever the process left behind
            rest = proc.partial.pop(fd, b"")
            if rest:
                self._emit(proc, is_err, rest)
            self._forget(proc, fd)

    def _forget(self, proc: _Managed, fd: int) -> None:
        try:
            self._sel.unregister(fd)
        except KeyError:  # already unregistered at EOF
            pass
        proc.streams.pop(fd, None)
        os.close(fd)

    # ---- signals ------------------------------------------------------------

    def request_shutdown(self) -> None:
        """Ask for a user shutdown; safe from signal handlers and other threads."""
        self._stop_requests += 1
        if self._wake_w is None:
            return  # not running yet: run() checks the counter before each start
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # pipe full (a wake-up is already pending) or closed
            pass

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request_shutdown()

    def _handle_stop_requests(self) -> None:
        while self._stops_handled < self._stop_requests:
            self._stops_handled += 1
            if not self._shutting_down:
                self._log("INFO", "launch", "user interrupted with ctrl-c (SIGINT)")
                self._user_shutdown = True
                self._begin_shutdown()
            else:  # asked again: stop waiting for graceful exits
                now = time.monotonic()
                for proc in self._procs:
                    if proc.popen is not None and proc.stage < 3:
                        proc.deadline = now

    def _signal_group(self, proc: _Managed, signum: int) -> None:
        assert proc.popen is not None
        try:
            os.killpg(proc.popen.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    # ---- process life cycle -------------------------------------------------

    def _start(self, proc: _Managed) -> None:
        spec = proc.spec
        env = dict(spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = " ".join(spec.cmd) if spec.shell else spec.cmd  # upstream joins for shell=True
        if spec.emulate_tty:
            (out_r, out_w), (err_r, err_w) = pty.openpty(), pty.openpty()
        else:
            (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        try:
            popen = subprocess.Popen(
                cmd,
                cwd=spec.cwd,
                env=env,
                shell=spec.shell,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            self._log("ERROR", spec.label, f"failed to start {shlex.join(spec.cmd)}: {exc}")
            if self._exit_code is None:
                self._exit_code = 1
            self._begin_shutdown()
            return
        os.close(out_w)
        os.close(err_w)
        proc.popen, proc.starts, proc.stage, proc.deadline = popen, proc.starts + 1, 0, None
        for fd, is_err in ((out_r, False), (err_r, True)):
            os.set_blocking(fd, False)
            proc.streams[fd] = is_err
            self._sel.register(fd, selectors.EVENT_READ, (proc, is_err))
        self._log("INFO", spec.label, f"process started with pid [{popen.pid}]")

    def _exited(self, proc: _Managed) -> int | None:
        """Return the exit code if the process ended, killing leftovers of its group."""
        assert proc.popen is not None
        if hasattr(os, "waitid"):
            try:
                info = os.waitid(os.P_PID, proc.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = True  # already reaped (cannot happen unless someone else waits)
            if info is None:
                return None
            # The leader is a zombie now, so its pid (the group id) cannot be
            # reused yet: killing the rest of the group here is race-free.
            self._signal_group(proc, signal.SIGKILL)
        return proc.popen.poll()

    def _reap(self) -> None:
        now = time.monotonic()
        for proc in self._procs:
            if proc.popen is None:
                continue
            returncode = self._exited(proc)
            if returncode is None:
                continue
            pid = proc.popen.pid
            self._close_streams(proc)
            proc.popen, proc.returncode, proc.deadline = None, returncode, None
            if returncode == 0:
                self._log("INFO", proc.spec.label, f"process has finished cleanly [pid {pid}]")
            else:
                self._log(
                    "ERROR",
                    proc.spec.label,
                    f"process has died [pid {pid}, "
                    f"{_describe_returncode(returncode)}, cmd "
                    f"'{shlex.join(proc.spec.cmd)}']",
                )
            self._after_exit(proc, returncode, now)

    def _after_exit(self, proc: _Managed, returncode: int, now: float) -> None:
        if self._shutting_down:
            return
        spec = proc.spec
        if spec.on_exit_shutdown:
            self._exit_code = 0 if returncode == 0 else _exit_status(returncode)
            if returncode == 0:
                self._log("INFO", "launch", f"required process [{spec.label}] exited; shutting down")
            else:
                self._log(
                    "ERROR",
                    "launch",
                    f"required process [{spec.label}] died with {_describe_returncode(returncode)}; shutting down",
                )
            self._begin_shutdown()
        elif spec.respawn and (spec.respawn_max_retries < 0 or proc.starts <= spec.respawn_max_retries):
            proc.respawn_at = now + spec.respawn_delay

    def _begin_shutdown(self) -> None:
        if self._shutting_down:
            return
        self._shutting_down = True
        # Timers still waiting are cancelled (cancel_on_shutdown="true", the default); the others fire
        # into a launch that is shutting down, where upstream starts nothing new either.
        self._pending = []
        now = time.monotonic()
        for proc in self._procs:
            proc.respawn_at = None
            if proc.popen is not None:
                self._signal_group(proc, signal.SIGINT)
                proc.stage, proc.deadline = 1, now + proc.spec.sigterm_timeout

    def _escalate(self, now: float) -> None:
        for proc in self._procs:
            if proc.popen is None or proc.deadline is None or proc.deadline > now:
                continue
            if proc.stage == 1:
                self._log("WARNING", proc.spec.label, "still running after SIGINT, sending SIGTERM")
                self._signal_group(proc, signal.SIGTERM)
                proc.stage, proc.deadline = 2, now + proc.spec.sigkill_timeout
            else:
                self._log("WARNING", proc.spec.label, "still running after SIGTERM, sending SIGKILL")
                self._signal_group(proc, signal.SIGKILL)
                proc.stage, proc.deadline = 3, None

    def _respawn(self, now: float) -> None:
        for proc in self._procs:
            if proc.respawn_at is not None and proc.respawn_at <= now:
                proc.respawn_at = None
                self._log("INFO", proc.spec.label, "respawning")
                self._start(proc)

    def _run_due(self, now: float) -> None:
        """Run the plan items whose delay has passed, in order."""
        while self._pending and not self._shutting_down and self._pending[0].delay_s <= now - self._t0:
            self._handle_stop_requests()
            if self._shutting_down:
                return
            item = self._pending.pop(0)
            if isinstance(item, LogMessage):
                self._log("INFO", "launch.user", item.message)
            elif isinstance(item, ShutdownRequest):
                self._log("INFO", "launch", f"shutdown requested: {item.reason}")
                if self._exit_code is None:
                    self._exit_code = 0
                self._begin_shutdown()
            else:
                proc = self._managed[id(item)]
                self._procs.append(proc)
                self._start(proc)

    # ---- main loop ----------------------------------------------------------

    def _timeout(self, now: float) -> float:
        deadlines = [p.respawn_at for p in self._procs if p.respawn_at is not None]
        deadlines += [p.deadline for p in self._procs if p.deadline is not None]
        deadlines += [self._t0 + self._pending[0].delay_s] if self._pending else []
        return max(0.0, min([_POLL_INTERVAL, *(d - now for d in deadlines)]))

    def _step(self) -> None:
        for key, _ in self._sel.select(self._timeout(time.monotonic())):
            if key.data is None:
                try:
                    os.read(key.fd, 4096)
                except BlockingIOError:
                    pass
            else:
                proc, is_err = key.data
                if not self._read(proc, key.fd, is_err):
                    # EOF while the process may still run (it closed the stream).
                    self._forget(proc, key.fd)
        self._handle_stop_requests()
        self._reap()
        now = time.monotonic()
        self._run_due(now)
        self._respawn(now)
        self._escalate(now)

    def _finished(self) -> bool:
        return not self._pending and all(p.popen is None and p.respawn_at is None for p in self._procs)

    def _result(self) -> int:
        if self._exit_code is not None:
            return self._exit_code
        if self._user_shutdown:
            return 0
        return 0 if all(p.returncode in (0, None) for p in self._procs) else 1

    def _open_launch_log(self) -> None:
        if self._log_dir is None:
            return
        self._log_dir.mkdir(parents=True, exist_ok=True)
        latest = self._log_dir.parent / "latest"
        try:  # upstream renews a 'latest' link next to the launch folders
            if latest.is_symlink():
                latest.unlink()
            if not latest.exists():
                latest.symlink_to(self._log_dir, target_is_directory=True)
        except OSError:
            pass
        self._launch_log = open(self._log_dir / "launch.log", "a", encoding="utf-8")
        self._log("INFO", "launch", f"All log files can be found below {self._log_dir}")

    def run(self) -> int:
        """Run everything; return the launch's exit code (see module docstring)."""
        self._selector = selectors.DefaultSelector()
        wake_r, self._wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(wake_r, selectors.EVENT_READ, None)
        restore = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                restore[signum] = signal.signal(signum, self._on_signal)
        try:
            self._open_launch_log()
            self._t0 = time.monotonic()
            self._run_due(self._t0)
            while not self._finished():
                self._step()
            return self._result()
        finally:
            self._kill_leftovers()
            for signum, handler in restore.items():
                if handler is not None:  # None: installed outside Python, cannot restore
                    signal.signal(signum, handler)
            self._selector.close()
            self._selector = None
            wake_w, self._wake_w = self._wake_w, None
            os.close(wake_r)
            os.close(wake_w)
            for handle in [self._launch_log, *(f for p in self._procs for f in p.own_logs.values())]:
                if handle is not None:
                    handle.close()

    def _kill_leftovers(self) -> None:
        # Only reached with live children when the loop raised (a bug or a
        # KeyboardInterrupt outside the main thread): never leave orphans.
        for proc in self._procs:
            if proc.popen is not None:
                self._signal_group(proc, signal.SIGKILL)
                proc.popen.wait()
                for fd in list(proc.streams):
                    os.close(fd)
                proc.streams.clear()
                proc.popen = None
