# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Pip-mode launch runner: executes ROS 2 XML launch files without ``ros2 launch``.

Implements the XML launch frontend of ``launch``/``launch_ros`` with upstream's
semantics (:mod:`.schema` for what each tag accepts and refuses, :mod:`.parser`
for the one walker behind run, --print and --show-args, :mod:`.substitutions`)
and a process supervisor that behaves like ``ros2 launch`` (:mod:`.supervisor`).
docs/launch.md lists the rules and the few deliberate differences.
Imports neither ``launch`` nor ``rclpy``.

Public API::

    parse_launch_file(path, launch_args) -> LaunchPlan
    run_launch_file(path, launch_args, *, print_only=False) -> int
    main(argv) -> int            # the ``vla-ros launch`` verb
"""

from .cli import find_launch_file, format_arguments, format_plan, main, run_launch_file
from .errors import LaunchError
from .model import LaunchArgument, LaunchPlan, LogMessage, NodeInfo, ParamFile, ProcessSpec, ShutdownRequest
from .parser import describe_arguments, parse_launch_file
from .substitutions import SUBSTITUTIONS
from .supervisor import Supervisor

__all__ = [
    "LaunchArgument",
    "LaunchError",
    "LaunchPlan",
    "LogMessage",
    "NodeInfo",
    "ParamFile",
    "ProcessSpec",
    "SUBSTITUTIONS",
    "ShutdownRequest",
    "Supervisor",
    "describe_arguments",
    "find_launch_file",
    "format_arguments",
    "format_plan",
    "main",
    "parse_launch_file",
    "run_launch_file",
]
