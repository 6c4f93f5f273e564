"""The one ``main()`` every node entry point uses (the lifecycle of ros2/examples' minimal nodes).

Spins (or calls the node's own ``spin()`` where it has one) and always cleans up: ``close()`` (the
node's own threads), ``destroy_node``, ``try_shutdown``. A node that cannot start on its configuration
(bad parameter, missing file) exits with status 2 and one line saying why, instead of a stack trace.

SIGINT and SIGTERM stop a node cleanly (exit 0, no traceback), in this order: the spin ends, the node's
threads stop, the node is destroyed, then the context is shut down. rclpy's own signal handlers are not
installed, because they shut the context down from another thread the moment a signal lands: the main
thread could be inside rcl then (``RCLError: context is not valid``) and the node's threads publishing
(``publisher's context is invalid``), which made shutdowns end with tracebacks or a wrong exit code.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.signals import SignalHandlerOptions

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(Exception):
    """Raised by the stop guard's callback inside the executor: SIGINT or SIGTERM asked the node to stop."""


class StopSignals:
    """Turns SIGINT/SIGTERM into a stop the executor sees at a callback boundary.

    Python runs signal handlers only between bytecodes, and a spinning main thread sits in rcl's wait (C
    code) until something arrives, so a handler alone could wait forever on a quiet node. Instead the
    signal's number goes to a wake-up pipe (``signal.set_wakeup_fd``); a small thread reads it, marks
    the stop and triggers a guard condition of the node, which every executor that spins the node waits
    on; the guard's callback raises :class:`StopRequested` in the spinning thread, between two callbacks.
    A signal before the node exists is remembered (``requested``) and the node is not spun at all. Signals
    after the spin has ended are ignored until the process exits, so cleanup and the interpreter's exit run
    to their end even when a launcher's SIGTERM follows its SIGINT on a slow machine (SIGKILL still works).
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._guard = None
        self._guard_lock = threading.Lock()  # the relay thread never triggers a guard being destroyed
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # the C-level signal handler must never block
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: None)  # the pipe does the work
        self._old_wakeup_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        self._relay = threading.Thread(target=self._run_relay, name="stop-signals", daemon=True)
        self._relay.start()

    def attach(self, node) -> None:
        """Give the node the guard condition that ends its spin (before spinning it)."""
        with self._guard_lock:
            self._guard = node.create_guard_condition(self._on_guard)
            if self.requested.is_set():
                self._guard.trigger()

    def _on_guard(self) -> None:
        if self.requested.is_set():
            raise StopRequested()

    def _run_relay(self) -> None:
        while True:
            data = os.read(self._read_fd, 64)
            if not data or 0 in data:  # 0: detach() asks the relay to end (no signal has number 0)
                return
            self.requested.set()
            with self._guard_lock:
                if self._guard is not None:
                    self._guard.trigger()

    def detach(self) -> None:
        """From here on signals change nothing (cleanup runs to its end) and the guard is left alone."""
        signal.set_wakeup_fd(self._old_wakeup_fd)
        os.write(self._write_fd, b"\0")
        self._relay.join()
        with self._guard_lock:
            self._guard = None  # destroyed with the node
        os.close(self._read_fd)
        os.close(self._write_fd)


def run_node(make_node: Callable[[], object], args: list[str] | None = None, *, freeze_gc: bool = False) -> int:
    """Run the node ``make_node()`` builds until it is asked to stop; the exit status. ``freeze_gc``: what the
    node allocated while it was built lives as long as the process (a model, buffers, the core), so it is
    moved out of the collector's view (``gc.freeze``) and a full collection never has to walk it in the
    middle of a control cycle or an intake."""
    # Signal handling needs the main thread; elsewhere (a node run inside a test) rclpy's stays.
    own_signals = threading.current_thread() is threading.main_thread()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO if own_signals else None)
    stop = StopSignals() if own_signals else None
    node = None
    try:
        try:
            node = make_node()
        except (ValueError, OSError) as err:  # ParameterError is a ValueError; a missing file an OSError
            print(f"[{getattr(make_node, '__name__', 'node')}] cannot start: {err}", file=sys.stderr)
            return 2
        if freeze_gc:
            gc.collect()
            gc.freeze()
        if stop is not None:
            stop.attach(node)
        spin = getattr(node, "spin", None)  # a node that paces its own executor (the controller's inline loop)
        if spin is not None:
            spin()
        else:
            rclpy.spin(node)
    except (StopRequested, KeyboardInterrupt, ExternalShutdownException):
        pass  # KeyboardInterrupt: Ctrl-C where rclpy's handlers are in charge (run_node outside the main thread)
    except Exception:
        # Only a node that shut rclpy down itself (sim_node when its physics thread fails) gets here with
        # rclpy no longer ok: rclpy raises RCLError or RuntimeError then. Anything else is a real error.
        if rclpy.ok():
            raise
    finally:
        if stop is not None:
            stop.detach()
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    # A node that stopped itself on an internal failure sets ``failed`` so the launcher sees it died.
    return 1 if getattr(node, "failed", False) else 0
