# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Data model of a resolved launch file: a flat, ordered list of process specs.

Upstream ``launch`` keeps an action tree that is executed lazily; the runner
instead resolves every action up front (conditions, includes, groups, timers,
substitutions) so the result can be printed, inspected by tests, and handed
to the supervisor as plain data: an ordered list of items (processes, log
messages, shutdown requests), each due ``delay_s`` after the launch starts
(non-zero inside ``<timer>``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LaunchArgument:
    """A declared ``<arg>``, as ``ros2 launch --show-args`` lists it."""

    name: str
    #: Raw default text (substitutions not evaluated); None for a required argument.
    default: str | None = None
    description: str = "no description given"
    choices: list[str] | None = None
    #: Value the argument resolved to (None when only described, not resolved).
    value: str | None = None
    #: True when declared under an if/unless (it may not be visited).
    conditional: bool = False
    #: ``file:line`` of the declaration.
    source: str = ""


@dataclass
class LogMessage:
    """``<log message>``: printed as ``[INFO] [launch.user]: message`` when its turn comes."""

    message: str
    delay_s: float = 0.0
    source: str = ""


@dataclass
class ShutdownRequest:
    """``<shutdown reason>``: ends the launch when its turn comes."""

    reason: str
    delay_s: float = 0.0
    source: str = ""
    #: False when the timer it is in was declared with cancel_on_shutdown="false".
    cancel_on_shutdown: bool = True


@dataclass
class ParamFile:
    """One ``--params-file`` of a node, in command-line order."""

    path: str
    #: True for files the runner wrote (inline ``<param>`` values, allow_substs).
    generated: bool = False
    #: For generated files from inline params: the flat ``{dotted.name: value}`` written.
    values: dict[str, Any] = field(default_factory=dict)
    #: True for a ``-p name:=value`` argument (``<set_parameter>``) instead of a file.
    rule: bool = False


@dataclass
class NodeInfo:
    """ROS-specific details of a ``<node>`` (already folded into ``ProcessSpec.cmd``)."""

    package: str | None
    executable: str
    name: str | None
    #: Absolute namespace after composing pushed namespaces; None when none was given.
    namespace: str | None
    #: ``--params-file`` files and ``-p`` rules in command-line order.
    params_files: list[ParamFile] = field(default_factory=list)
    remappings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def parameters(self) -> dict[str, Any]:
        """All inline parameter values merged in order (later files win)."""
        merged: dict[str, Any] = {}
        for params_file in self.params_files:
            merged.update(params_file.values)
        return merged


@dataclass
class ProcessSpec:
    """A process to run, with every substitution already evaluated."""

    #: Output prefix without brackets, e.g. ``talker-1`` (name or exec + launch-wide counter).
    label: str
    cmd: list[str]
    #: Complete environment of the child (launch environment + ``<env>`` children).
    env: dict[str, str]
    cwd: str | None = None
    shell: bool = False
    #: ``screen``, ``log``, ``both``, ``own_log`` or ``full`` (launch.logging's aliases).
    output: str = "log"
    emulate_tty: bool = False
    #: Seconds after the launch starts (``<timer>``).
    delay_s: float = 0.0
    #: False when the timer it is in was declared with cancel_on_shutdown="false".
    cancel_on_shutdown: bool = True
    #: ``on_exit="shutdown"``: this process ending ends the whole launch.
    on_exit_shutdown: bool = False
    respawn: bool = False
    respawn_delay: float = 0.0
    #: -1 means respawn forever (upstream's default).
    respawn_max_retries: int = -1
    sigterm_timeout: float = 5.0
    sigkill_timeout: float = 5.0
    node: NodeInfo | None = None
    #: ``file:line`` of the ``<node>``/``<executable>`` tag.
    source: str = ""


PlanItem = ProcessSpec | LogMessage | ShutdownRequest


@dataclass
class LaunchPlan:
    """Result of :func:`parse_launch_file`."""

    launch_file: Path
    #: Everything the launch does, in the order upstream executes it (timers last, by firing time).
    items: list[PlanItem] = field(default_factory=list)
    #: Declared arguments in visiting order (first declaration of a name wins).
    arguments: list[LaunchArgument] = field(default_factory=list)
    #: Launch configurations of the top-level file once parsing finished.
    configurations: dict[str, str] = field(default_factory=dict)
    #: Non-fatal problems (e.g. unknown attributes), for the caller to show.
    warnings: list[str] = field(default_factory=list)
    #: Directory holding generated parameter files (None when none were needed).
    params_dir: Path | None = None
    #: The launch log directory a run writes (created when the run starts).
    log_dir: Path | None = None

    @property
    def processes(self) -> list[ProcessSpec]:
        return [item for item in self.items if isinstance(item, ProcessSpec)]

    def cleanup(self) -> None:
        """Delete generated parameter files."""
        if self.params_dir is not None:
            shutil.rmtree(self.params_dir, ignore_errors=True)
            self.params_dir = None
