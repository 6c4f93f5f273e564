# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""``vla-ros launch``: run a ROS 2 XML launch file without ``ros2 launch``.

Follows the ``ros2 launch`` command line: ``FILE`` or ``PKG FILE`` (looked
up in the package's share directory), ``name:=value`` launch arguments,
``-s/--show-args`` to list declared arguments in the same format, and
``-p/--print`` which here prints the resolved command lines (upstream prints
the launch description tree instead). All three walk the file with the same
resolver (:mod:`.parser`), so a file that --print or --show-args accepts is
one a run accepts.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import packages
from .errors import LaunchError
from .model import LaunchArgument, LaunchPlan, LogMessage, ProcessSpec, ShutdownRequest
from .parser import describe_arguments, parse_launch_file
from .supervisor import Supervisor

# Directories never searched for PKG FILE: in pip mode the "share directory"
# is the source tree, which may hold a virtualenv and build outputs.
_SKIP_DIRS = {"build", "install", "log", "node_modules", "__pycache__"}
# Launch configurations upstream reads without an <arg> declaring them.
_IMPLICIT_ARGS = {"sigterm_timeout", "sigkill_timeout", "launch-prefix", "launch-prefix-filter", "emulate_tty"}


def find_launch_file(package: str, file_name: str) -> Path:
    """Find *file_name* in *package*'s share directory (``launch/`` first, then anywhere)."""
    share = packages.find_package_share(package)
    direct = share / "launch" / file_name
    if direct.is_file():
        return direct
    matches = []
    for root, dirs, files in os.walk(share):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        if file_name in files:
            matches.append(Path(root) / file_name)
    if not matches:
        raise LaunchError(f"file '{file_name}' was not found in the share directory of package '{package}' ({share})")
    if len(matches) > 1:
        raise LaunchError(
            f"file '{file_name}' was found more than once in package '{package}': {', '.join(map(str, matches))}"
        )
    return matches[0]


def format_plan(plan: LaunchPlan) -> str:
    """Render the plan as commented, copy-pasteable shell command lines, in execution order."""
    lines = []
    for item in plan.items:
        after = f" (after {item.delay_s:g} s)" if item.delay_s else ""
        if isinstance(item, LogMessage):
            lines.append(f"# [log]{after} {item.message}")
            continue
        if isinstance(item, ShutdownRequest):
            lines.append(f"# [shutdown]{after} {item.reason} ({item.source})")
            continue
        lines.extend(_format_process(item, after))
    return "\n".join(lines)


def _format_process(spec: ProcessSpec, after: str) -> list[str]:
    notes = []
    if spec.node is not None:
        ns = spec.node.namespace or ""
        notes.append(f"node {ns.rstrip('/')}/{spec.node.name}" if spec.node.name else f"node {spec.node.executable}")
    if spec.on_exit_shutdown:
        notes.append("on_exit=shutdown")
    if spec.respawn:
        notes.append(f"respawn (delay {spec.respawn_delay:g} s)")
    if spec.output != "log":
        notes.append(f"output={spec.output}")
    header = f"# [{spec.label}]{after} {spec.source}" + (f" ({', '.join(notes)})" if notes else "")
    prefix = []
    removed = sorted(k for k in os.environ if k not in spec.env)
    changed = {k: v for k, v in spec.env.items() if os.environ.get(k) != v}
    if removed or changed:
        prefix.append("env")
        for name in removed:
            prefix += ["-u", name]
        prefix += [f"{k}={v}" for k, v in changed.items()]
    if spec.shell:  # the command is shell syntax already: do not quote it
        command = " ".join([shlex.join(prefix)] * bool(prefix) + spec.cmd)
    else:
        command = shlex.join(prefix + spec.cmd)
    if spec.cwd:
        command = f"cd {shlex.quote(spec.cwd)} && {command}"
    return [header, command]


def format_arguments(arguments: Sequence[LaunchArgument]) -> str:
    """Same layout as ``ros2 launch --show-args``."""
    out = ["Arguments (pass arguments as '<name>:=<value>'):"]
    for arg in arguments:
        entry = f"\n    '{arg.name}':" + ("*" if arg.conditional else "")
        entry += f"\n        {arg.description}"
        if arg.default is not None:
            entry += f"\n        (default: '{arg.default}')"
        out.append(entry)
    if not arguments:
        out.append("\n  No arguments.")
    elif any(arg.conditional for arg in arguments):
        out.append("\n* argument(s) which are only used if specific conditions occur")
    return "\n".join(out)


def run_launch_file(
    path: str | os.PathLike, launch_args: Mapping[str, str] | None = None, *, print_only: bool = False
) -> int:
    """Resolve and run a launch file; return the launch's exit code.

    With *print_only*, print the resolved command lines and return 0 (the
    generated parameter files are kept so the printed commands work).
    Raises :class:`LaunchError` when the file cannot be resolved.
    """
    launch_args = dict(launch_args or {})
    plan = parse_launch_file(path, launch_args)
    for warning in plan.warnings:
        print(f"[WARNING] [launch]: {warning}", file=sys.stderr)
    declared = {arg.name for arg in plan.arguments}
    for name in sorted(set(launch_args) - declared - _IMPLICIT_ARGS):
        print(f"[WARNING] [launch]: argument '{name}' is not declared by any <arg> that was visited", file=sys.stderr)
    if print_only:
        print(format_plan(plan))
        return 0
    try:
        return Supervisor(plan.items, log_dir=plan.log_dir).run()
    finally:
        plan.cleanup()


def _parse_launch_args(items: Sequence[str]) -> dict[str, str]:
    result = {}
    for item in items:
        name, _, value = item.partition(":=")
        if not name:
            raise LaunchError(f"malformed launch argument '{item}', expected '<name>:=<value>'")
        result[name] = value
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vla-ros launch``; *argv* excludes the program and verb names."""
    parser = argparse.ArgumentParser(
        prog="vla-ros launch", description="Run a ROS 2 XML launch file (pip mode, no ros2 launch needed)."
    )
    parser.add_argument(
        "target",
        nargs="+",
        metavar="FILE | PKG FILE",
        help="launch file path, or package name and launch file name; then launch arguments as 'name:=value'",
    )
    parser.add_argument(
        "-p",
        "--print",
        "--print-description",
        dest="print_only",
        action="store_true",
        help="print the resolved command lines and exit",
    )
    parser.add_argument(
        "-s",
        "--show-args",
        "--show-arguments",
        dest="show_args",
        action="store_true",
        help="list the launch arguments and exit",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    positional: list[str] = [t for t in args.target if ":=" not in t]
    try:
        launch_args = _parse_launch_args([t for t in args.target if ":=" in t])
        if len(positional) == 1:
            path = Path(positional[0])
        elif len(positional) == 2:
            path = find_launch_file(positional[0], positional[1])
        else:
            parser.error("expected FILE or PKG FILE, then name:=value arguments")
        if not path.is_file():
            hint = "" if os.sep in str(path) else " (for a file in a package use: PKG FILE)"
            raise LaunchError(f"launch file '{path}' does not exist{hint}")
        if args.show_args:
            print(format_arguments(describe_arguments(path, launch_args)))
            return 0
        return run_launch_file(path, launch_args, print_only=args.print_only)
    except LaunchError as exc:
        print(f"[ERROR] [launch]: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C while resolving, before any process started
        return 130
