"""CPU hogs for a measurement under load (``--load N`` of ``vla-ros eval --live`` and ``vla-ros bench
latency``): N processes that each spin one core at normal priority, as ``yes > /dev/null`` does, for as long
as the ``with`` block runs. What a robot's computer has beside the graph: a browser, a compile, a logger."""

from __future__ import annotations

import shutil
import subprocess
import sys


class CpuHogs:
    """``with CpuHogs(n):`` n busy processes (``yes`` with its output discarded; a Python loop where ``yes``
    is missing), stopped and reaped on the way out."""

    def __init__(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"the number of CPU hogs must be >= 0, got {n}")
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def command(self) -> list[str]:
        yes = shutil.which("yes")
        return [yes] if yes else [sys.executable, "-c", "while True: pass"]

    def __enter__(self) -> CpuHogs:
        for _ in range(self.n):
            self.procs.append(
                subprocess.Popen(
                    self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
                )
            )
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs.clear()
