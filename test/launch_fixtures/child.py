"""Helper process for test_launch_runner.py: ``python child.py MODE [ARGS...]``.

Modes: sleep READY (exit 0 on SIGINT), stubborn READY (ignore SIGINT, exit on
SIGTERM), exit CODE [WAIT_FILE], count FILE, waitlines FILE N CODE, echo, env NAME.
READY files receive the pid once signal handlers are installed.
"""

import os
import signal
import sys
import time


def wait_for_lines(path, lines=1, timeout=60.0):  # an upper bound for a busy machine
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as handle:
                if len(handle.read().splitlines()) >= lines:
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    sys.exit(99)


def announce(path):
    with open(path + ".tmp", "w") as handle:
        handle.write(f"{os.getpid()}\n")
    os.replace(path + ".tmp", path)


def on_sigint(*_):
    print(f"{os.path.basename(sys.argv[2])} got SIGINT", flush=True)
    sys.exit(0)


def on_sigterm(*_):
    print("got SIGTERM", flush=True)
    sys.exit(0)


mode, args = sys.argv[1], sys.argv[2:]
if mode in ("sleep", "stubborn"):
    if mode == "sleep":
        signal.signal(signal.SIGINT, on_sigint)
    else:
        signal.signal(signal.SIGINT, lambda *_: print("ignoring SIGINT", flush=True))
        signal.signal(signal.SIGTERM, on_sigterm)
    announce(args[0])
    while True:
        time.sleep(0.5)
elif mode == "exit":
    if len(args) > 1:
        wait_for_lines(args[1])
    print(f"exiting with {args[0]}", flush=True)
    sys.exit(int(args[0]))
elif mode == "count":
    with open(args[0], "a") as handle:
        handle.write("run\n")
elif mode == "waitlines":
    wait_for_lines(args[0], int(args[1]))
    sys.exit(int(args[2]))
elif mode == "echo":
    print("hello stdout")
    print("hello stderr", file=sys.stderr)
    sys.stdout.write("no newline")
elif mode == "env":
    print(os.environ.get(args[0], "<unset>"))
else:
    sys.exit(f"unknown mode {mode}")
