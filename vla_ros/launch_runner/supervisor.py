# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Start, watch and stop the processes of a launch plan (POSIX only).

Follows ``launch``'s ExecuteProcess behaviour as ``ros2 launch`` shows it:

* processes start in document order; every output line is prefixed with
  ``[<label>]`` (stdout to stdout, stderr to stderr);
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
* a process that ends the launch is never respawned.

The loop is single-threaded: one selector watches every pipe plus a wake-up
pipe written by the signal handler, and exits are polled every 50 ms.
"""

from __future__ import annotations

import itertools
import os
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Dict, List, Optional

from .model import ProcessSpec

_POLL_INTERVAL = 0.05
_MAX_LINE = 65536


def _exit_status(returncode: int) -> int:
    """Shell convention: a child killed by signal N is reported as 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            return f'signal {signal.Signals(-returncode).name}'
        except ValueError:
            return f'signal {-returncode}'
    return f'exit code {returncode}'


class _Managed:
    """Runtime state of one ProcessSpec (across respawns)."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.popen: Optional[subprocess.Popen] = None
        self.starts = 0
        self.returncode: Optional[int] = None
        self.respawn_at: Optional[float] = None
        # Shutdown escalation: 0 nothing sent, 1 SIGINT, 2 SIGTERM, 3 SIGKILL.
        self.stage = 0
        self.deadline: Optional[float] = None
        self.partial: Dict[int, bytes] = {}


class Supervisor:
    """Runs the processes of a plan until they are done or shut down."""

    def __init__(self, processes: List[ProcessSpec], *,
                 stdout: Optional[IO[str]] = None, stderr: Optional[IO[str]] = None) -> None:
        self._procs = [_Managed(spec) for spec in processes]
        self._stdout = stdout
        self._stderr = stderr
        # Created by run(), so a Supervisor that never runs holds no descriptors.
        self._selector: Optional[selectors.BaseSelector] = None
        self._wake_w: Optional[int] = None
        self._stop_requests = 0  # written by signal handlers / other threads
        self._stops_handled = 0
        self._shutting_down = False
        self._user_shutdown = False
        self._exit_code: Optional[int] = None  # set by the cause that ended the launch

    @property
    def _sel(self) -> selectors.BaseSelector:
        assert self._selector is not None, 'only valid while run() is running'
        return self._selector

    # ---- output -------------------------------------------------------------

    def _out(self, is_err: bool) -> IO[str]:
        # Looked up late so pytest's capsys (which swaps sys.stdout) sees output.
        if is_err:
            return self._stderr or sys.stderr
        return self._stdout or sys.stdout

    def _write(self, is_err: bool, text: str) -> None:
        stream = self._out(is_err)
        try:
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):  # reader went away / stream closed
            pass

    def _log(self, level: str, who: str, message: str) -> None:
        self._write(True, f'[{level}] [{who}]: {message}\n')

    def _emit(self, proc: _Managed, is_err: bool, line: bytes) -> None:
        text = line.decode('utf-8', errors='replace').rstrip('\r')
        self._write(is_err, f'[{proc.spec.label}] {text}\n')

    def _read(self, proc: _Managed, fd: int, is_err: bool, *, drain: bool = False) -> bool:
        """Forward what is available on *fd*; False once it reached EOF.

        Reads a bounded amount unless *drain*, so one chatty process cannot
        starve the others (the selector calls back while data is left).
        """
        for _ in itertools.count() if drain else range(16):
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                chunk = b''
            buffered = proc.partial.get(fd, b'') + chunk
            *lines, rest = buffered.split(b'\n')
            for line in lines:
                self._emit(proc, is_err, line)
            if not chunk or len(rest) > _MAX_LINE:
                if rest:
                    self._emit(proc, is_err, rest)
                rest = b''
            proc.partial[fd] = rest
            if not chunk:
                return False
        return True

    def _close_pipes(self, proc: _Managed) -> None:
        assert proc.popen is not None
        for pipe, is_err in ((proc.popen.stdout, False), (proc.popen.stderr, True)):
            if pipe is None or pipe.closed:
                continue
            fd = pipe.fileno()
            self._read(proc, fd, is_err, drain=True)  # whatever the process left behind
            rest = proc.partial.pop(fd, b'')
            if rest:
                self._emit(proc, is_err, rest)
            try:
                self._sel.unregister(fd)
            except KeyError:  # already unregistered at EOF
                pass
            pipe.close()

    # ---- signals ------------------------------------------------------------

    def request_shutdown(self) -> None:
        """Ask for a user shutdown; safe from signal handlers and other threads."""
        self._stop_requests += 1
        if self._wake_w is None:
            return  # not running yet: run() checks the counter before each start
        try:
            os.write(self._wake_w, b'x')
        except OSError:  # pipe full (a wake-up is already pending) or closed
            pass

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.request_shutdown()

    def _handle_stop_requests(self) -> None:
        while self._stops_handled < self._stop_requests:
            self._stops_handled += 1
            if not self._shutting_down:
                self._log('INFO', 'launch', 'user interrupted, shutting down')
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
        env.setdefault('PYTHONUNBUFFERED', '1')
        cmd = ' '.join(spec.cmd) if spec.shell else spec.cmd  # upstream joins for shell=True
        try:
            popen = subprocess.Popen(
                cmd, cwd=spec.cwd, env=env, shell=spec.shell, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            self._log('ERROR', spec.label, f'failed to start {shlex.join(spec.cmd)}: {exc}')
            if self._exit_code is None:
                self._exit_code = 1
            self._begin_shutdown()
            return
        proc.popen, proc.starts, proc.stage, proc.deadline = popen, proc.starts + 1, 0, None
        for pipe, is_err in ((popen.stdout, False), (popen.stderr, True)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            self._sel.register(pipe.fileno(), selectors.EVENT_READ, (proc, is_err))
        self._log('INFO', spec.label, f'process started with pid [{popen.pid}]')

    def _exited(self, proc: _Managed) -> Optional[int]:
        """Return the exit code if the process ended, killing leftovers of its group."""
        assert proc.popen is not None
        if hasattr(os, 'waitid'):
            try:
                info = os.waitid(os.P_PID, proc.popen.pid,
                                 os.WEXITED | os.WNOHANG | os.WNOWAIT)
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
            self._close_pipes(proc)
            proc.popen, proc.returncode, proc.deadline = None, returncode, None
            if returncode == 0:
                self._log('INFO', proc.spec.label, f'process has finished cleanly [pid {pid}]')
            else:
                self._log('ERROR', proc.spec.label, f'process has died [pid {pid}, '
                          f'{_describe_returncode(returncode)}, cmd '
                          f"'{shlex.join(proc.spec.cmd)}']")
            self._after_exit(proc, returncode, now)

    def _after_exit(self, proc: _Managed, returncode: int, now: float) -> None:
        if self._shutting_down:
            return
        spec = proc.spec
        if spec.on_exit_shutdown:
            self._exit_code = 0 if returncode == 0 else _exit_status(returncode)
            if returncode == 0:
                self._log('INFO', 'launch', f'required process [{spec.label}] exited; '
                          'shutting down')
            else:
                self._log('ERROR', 'launch', f'required process [{spec.label}] died with '
                          f'{_describe_returncode(returncode)}; shutting down')
            self._begin_shutdown()
        elif spec.respawn and (spec.respawn_max_retries < 0
                               or proc.starts <= spec.respawn_max_retries):
            proc.respawn_at = now + spec.respawn_delay

    def _begin_shutdown(self) -> None:
        if self._shutting_down:
            return
        self._shutting_down = True
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
                self._log('WARNING', proc.spec.label, 'still running after SIGINT, '
                          'sending SIGTERM')
                self._signal_group(proc, signal.SIGTERM)
                proc.stage, proc.deadline = 2, now + proc.spec.sigkill_timeout
            else:
                self._log('WARNING', proc.spec.label, 'still running after SIGTERM, '
                          'sending SIGKILL')
                self._signal_group(proc, signal.SIGKILL)
                proc.stage, proc.deadline = 3, None

    def _respawn(self, now: float) -> None:
        for proc in self._procs:
            if proc.respawn_at is not None and proc.respawn_at <= now:
                proc.respawn_at = None
                self._log('INFO', proc.spec.label, 'respawning')
                self._start(proc)

    # ---- main loop ----------------------------------------------------------

    def _timeout(self, now: float) -> float:
        deadlines = [p.respawn_at for p in self._procs if p.respawn_at is not None]
        deadlines += [p.deadline for p in self._procs if p.deadline is not None]
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
                    # EOF while the process may still run (it closed the pipe).
                    self._sel.unregister(key.fd)
        self._handle_stop_requests()
        self._reap()
        now = time.monotonic()
        self._respawn(now)
        self._escalate(now)

    def _finished(self) -> bool:
        return all(p.popen is None and p.respawn_at is None for p in self._procs)

    def _result(self) -> int:
        if self._exit_code is not None:
            return self._exit_code
        if self._user_shutdown:
            return 0
        return 0 if all(p.returncode in (0, None) for p in self._procs) else 1

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
            for proc in self._procs:
                self._handle_stop_requests()
                if self._shutting_down:
                    break
                self._start(proc)
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

    def _kill_leftovers(self) -> None:
        # Only reached with live children when the loop raised (a bug or a
        # KeyboardInterrupt outside the main thread): never leave orphans.
        for proc in self._procs:
            if proc.popen is not None:
                self._signal_group(proc, signal.SIGKILL)
                proc.popen.wait()
                for pipe in (proc.popen.stdout, proc.popen.stderr):
                    if pipe is not None and not pipe.closed:
                        pipe.close()
                proc.popen = None
