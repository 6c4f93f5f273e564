# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Resolve a ROS 2 XML launch file into a :class:`LaunchPlan`: the one walker behind run, --print and --show-args.

Each file is first checked whole against :mod:`.schema` (upstream parses the whole file before running
anything). Then its actions run in document order against a scope that plays the role of upstream's
launch context, with upstream's rules:

* launch configurations hold the arguments and ``<let>`` values and also launch_ros' state: the pushed
  ROS namespace (``ros_namespace``), ``<set_parameter>``/``<set_parameters_from_file>``
  (``global_params``) and ``<set_remap>`` (``ros_remaps``) -- so ``<group forwarding="false">`` clears
  them and ``$(var ros_namespace)`` reads the namespace;
* ``<include>`` is not a scope: its ``<arg>`` values and everything the included file sets stay set
  afterwards (wrap it in a ``<group>`` to scope it);
* a scoped ``<group>`` copies the configurations shallowly, so a ``<set_parameter>`` or
  ``<set_remap>`` inside it extends the list the enclosing scope already has, and leaks out (a warning
  says so);
* ``<timer>`` actions run after the main description, by firing time, with the launch configurations
  as they were when the timer was reached (ros2/launch#836) and the environment of the launch's top
  level;
* relative paths (``<include file>``, ``<param from>``, ``<set_parameters_from_file>``) are relative to
  the working directory, as the processes' are.

``describing=True`` (``--show-args``) walks the same tree without evaluating conditions or starting
anything: every ``<arg>`` reachable through groups, timers and includes whose path can be evaluated.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import os
import re
import shlex
import socket
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import packages, schema, xmlfile
from .errors import LaunchError
from .model import LaunchArgument, LaunchPlan, LogMessage, NodeInfo, ParamFile, ProcessSpec, ShutdownRequest
from .namespaces import make_namespace_absolute, namespace_problem, node_name_problem, prefix_namespace
from .params import param_value, write_params_file
from .substitutions import (
    EvalContext,
    evaluate,
    evaluate_condition,
    parse_template,
    split_command_line,
    to_bool,
)
from .xmlfile import Element

_MAX_INCLUDE_DEPTH = 32
#: launch.logging's output aliases.
OUTPUTS = ("screen", "log", "both", "own_log", "full")


@dataclass
class _Scope:
    """Upstream's launch context as actions see it."""

    configurations: dict[str, Any]
    environment: dict[str, str]
    launch_file: Path
    delay_s: float = 0.0  # inside a <timer>
    cancel_on_shutdown: bool = True
    conditional: bool = False  # describing: under an if/unless or a timer
    #: ids of list configurations this scope shares with an enclosing scope (shallow copy).
    shared: frozenset = frozenset()

    def copy(self) -> _Scope:
        lists = frozenset(id(v) for v in self.configurations.values() if isinstance(v, list))
        return replace(
            self,
            configurations=dict(self.configurations),
            environment=dict(self.environment),
            shared=self.shared | lists,
        )


def _describe_argument(description: str | None, choices: list[str] | None) -> str:
    # Same text as upstream DeclareLaunchArgument.description.
    if description is None:
        return "no description given" if choices is None else f"One of: {choices}"
    if choices is None:
        return description
    return (description if description.endswith(".") else description + ".") + f" Valid choices are: {choices}"


def default_log_dir() -> Path:
    """launch.logging: $ROS_LOG_DIR, else $ROS_HOME/log, else ~/.ros/log; one folder per launch."""
    base = os.environ.get("ROS_LOG_DIR") or os.path.join(os.environ.get("ROS_HOME") or os.path.join("~", ".ros"), "log")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S-%f")
    return Path(os.path.normpath(os.path.expanduser(base))) / f"{stamp}-{socket.gethostname()}-{os.getpid()}"


class _Resolver:
    def __init__(self, plan: LaunchPlan, describing: bool = False) -> None:
        self.plan = plan
        self.describing = describing
        self.initial_environment = dict(os.environ)
        self.process_count = 0
        self.generated_count = 0
        self.include_depth = 0
        self.argument_names: set = set()
        self.timers: list = []  # heap of (fire_s, seq, elements, scope)
        self.seq = itertools.count()

    # ---- attribute access ---------------------------------------------------

    def ctx(self, scope: _Scope) -> EvalContext:
        return EvalContext(
            scope.configurations,
            scope.environment,
            scope.launch_file,
            log_dir=lambda: self.plan.log_dir,
            warn=self.warn,
        )

    def warn(self, message: str) -> None:
        self.plan.warnings.append(message)

    @staticmethod
    def error(el: Element, attr: str | None, message: str) -> LaunchError:
        where = f"{el.where}: <{el.tag}>" + (f" attribute '{attr}'" if attr else "")
        return LaunchError(f"{where}: {message}")

    def get(self, el: Element, attr: str, scope: _Scope, default: Any = None) -> Any:
        """The attribute's value: templates evaluated, literals as parsed, ``default`` when absent."""
        if attr not in el.values:
            return default
        value = el.values[attr]
        if not isinstance(value, list):
            return value
        try:
            return evaluate(value, self.ctx(scope))
        except LaunchError as exc:
            raise self.error(el, attr, str(exc)) from None

    def get_typed(self, el: Element, attr: str, scope: _Scope, default: Any) -> Any:
        """FLOAT_OR_SUBST / BOOL_OR_SUBST / respawn: a substitution is typed when the action runs."""
        value = el.values.get(attr)
        if value is None:
            return default
        if not isinstance(value, list):
            return value
        text = self.get(el, attr, scope)
        try:
            if schema.ACTIONS[el.tag].attrs.get(attr, schema.S).kind is schema.Kind.FLOAT_OR_SUBST:
                return float(text)
            return to_bool(text, attr)
        except (ValueError, LaunchError) as exc:
            raise self.error(el, attr, f"{text!r}: {exc}") from None

    def command_line(self, el: Element, attr: str, scope: _Scope) -> list[str]:
        try:
            return split_command_line(el.values[attr], self.ctx(scope))
        except LaunchError as exc:
            raise self.error(el, attr, str(exc)) from None

    def resolve_path(self, el: Element, attr: str, scope: _Scope) -> Path:
        # Relative to the working directory, as upstream (os.path.abspath) and the processes see it.
        return Path(os.path.abspath(os.path.expanduser(self.get(el, attr, scope))))

    def next_label(self, base: str) -> str:
        self.process_count += 1
        return f"{base}-{self.process_count}"

    def generated_file(self, stem: str) -> Path:
        if self.plan.params_dir is None:
            self.plan.params_dir = Path(tempfile.mkdtemp(prefix="vla_ros_launch_"))
        self.generated_count += 1
        return self.plan.params_dir / f"{stem}_{self.generated_count}.yaml"

    # ---- traversal ----------------------------------------------------------

    def run_file(self, path: Path, scope: _Scope) -> None:
        root = xmlfile.load(Path(path))
        schema.check_file(root)
        if "deprecated" in root.values and not self.describing:
            self.warn(f"launch file '{path}' is deprecated: {root.values['deprecated']}")
        self.visit_all(root.children, scope)

    def visit_all(self, elements: Iterable[Element], scope: _Scope) -> None:
        for el in elements:
            self.visit(el, scope)

    def visit(self, el: Element, scope: _Scope) -> None:
        handler = getattr(self, "tag_" + el.tag.replace("-", "_"))
        if self.describing:
            # Conditions are not evaluated: the action and what it holds are "conditional".
            if "if" in el.values or "unless" in el.values:
                scope = replace(scope, conditional=True)  # same configurations, flag set
            handler(el, scope)
        elif self.condition_holds(el, scope):
            handler(el, scope)

    def condition_holds(self, el: Element, scope: _Scope) -> bool:
        for attr, wanted in (("if", True), ("unless", False)):
            if attr in el.values:
                value = self.get(el, attr, scope)
                try:
                    return evaluate_condition(value) is wanted
                except LaunchError as exc:
                    raise self.error(el, attr, str(exc)) from None
        return True

    def best_effort(self, action) -> None:
        """Describing: evaluate what can be evaluated (later includes may need it), skip the rest."""
        try:
            action()
        except LaunchError:
            pass

    # ---- launch configurations -----------------------------------------------

    def tag_arg(self, el: Element, scope: _Scope) -> None:
        name = el.values["name"]
        choices = [c.values["value"] for c in el.children] or None
        description = _describe_argument(el.values.get("description"), choices)
        if name not in self.argument_names:
            self.argument_names.add(name)
            self.plan.arguments.append(
                LaunchArgument(
                    name=name,
                    default=el.attrib.get("default"),
                    description=description,
                    choices=choices,
                    conditional=scope.conditional,
                    source=el.where,
                )
            )
        if self.describing:
            if name not in scope.configurations and "default" in el.values:
                scope.configurations[name] = el.attrib["default"]
                self.best_effort(lambda: scope.configurations.__setitem__(name, self.get(el, "default", scope)))
            return
        if name not in scope.configurations:
            if "default" not in el.values:
                raise self.error(
                    el, "name", f"required launch argument '{name}' was not provided (description: '{description}')"
                )
            scope.configurations[name] = self.get(el, "default", scope)
        value = scope.configurations[name]
        if choices is not None and value not in choices:
            raise self.error(
                el, "name", f"argument '{name}' got {value!r}, which is not one of the valid choices {choices}"
            )
        for argument in self.plan.arguments:
            if argument.name == name and argument.value is None:
                argument.value = value

    def tag_let(self, el: Element, scope: _Scope) -> None:
        def run() -> None:
            scope.configurations[self.get(el, "name", scope)] = self.get(el, "value", scope)

        self.best_effort(run) if self.describing else run()

    def tag_reset(self, el: Element, scope: _Scope) -> None:
        keeps = {self.get(k, "name", scope): self.get(k, "value", scope) for k in el.children}
        scope.configurations.clear()
        scope.configurations.update(keeps)

    def tag_include(self, el: Element, scope: _Scope) -> None:
        if self.describing:
            try:
                path = self.resolve_path(el, "file", scope)
                for arg in el.children:
                    scope.configurations[self.get(arg, "name", scope)] = self.get(arg, "value", scope)
            except LaunchError:
                return  # needs values only known at launch time: skipped, as upstream
            if (
                not path.is_file()
                or path.suffix in (".py", ".yaml", ".yml")
                or self.include_depth >= _MAX_INCLUDE_DEPTH
            ):
                return
        else:
            path = self.resolve_path(el, "file", scope)
            if not path.is_file():
                hint = (
                    " (relative paths are relative to the working directory, as under ros2 launch: write "
                    "$(dirname)/...)"
                    if not os.path.isabs(el.attrib["file"]) and "$(" not in el.attrib["file"]
                    else ""
                )
                raise self.error(el, "file", f"launch file '{path}' does not exist{hint}")
            if path.suffix in (".py", ".yaml", ".yml"):
                raise self.error(el, "file", f"'{path}': vla-ros launch runs XML launch files only; use ros2 launch")
            # Upstream sets the include's arguments as launch configurations of the current scope.
            values = [(self.get(arg, "name", scope), self.get(arg, "value", scope)) for arg in el.children]
            scope.configurations.update(values)
            if self.include_depth >= _MAX_INCLUDE_DEPTH:
                raise self.error(el, "file", "includes nested too deeply (recursive include?)")
        self.include_depth += 1
        outer_file = scope.launch_file
        scope.launch_file = path
        try:
            self.run_file(path, scope)
        except LaunchError as exc:
            if self.describing:
                return
            raise LaunchError(f"{exc}\n  (included from {el.where})") from None
        finally:
            scope.launch_file = outer_file
            self.include_depth -= 1

    def tag_group(self, el: Element, scope: _Scope) -> None:
        scoped, forwarding = el.values.get("scoped", True), el.values.get("forwarding", True)
        keeps = [c for c in el.children if c.tag == "keep"]
        actions = [c for c in el.children if c.tag != "keep"]
        if not scoped:
            for keep in keeps:
                scope.configurations[self.get(keep, "name", scope)] = self.get(keep, "value", scope)
            self.visit_all(actions, scope)
            return
        inner = scope.copy()
        values = [(self.get(k, "name", scope), self.get(k, "value", scope)) for k in keeps]
        if not forwarding:  # upstream resets the configurations and the environment
            inner.configurations.clear()
            inner.environment = dict(self.initial_environment)
            inner.shared = frozenset()
        inner.configurations.update(values)
        self.visit_all(actions, inner)

    def tag_timer(self, el: Element, scope: _Scope) -> None:
        if self.describing:
            self.visit_all(el.children, replace(scope, conditional=True))
            return
        period = max(0.0, self.get_typed(el, "period", scope, 0.0))
        inner = scope.copy()  # the configurations as they are now (ros2/launch#836)
        inner.delay_s = scope.delay_s + period
        inner.cancel_on_shutdown = self.get_typed(el, "cancel_on_shutdown", scope, True)
        heapq.heappush(self.timers, (inner.delay_s, next(self.seq), el.children, inner))

    def run_timers(self, top: _Scope) -> None:
        while self.timers:
            _fire, _seq, elements, scope = heapq.heappop(self.timers)
            scope.environment = dict(top.environment)  # the launch's environment when the timer fires
            self.visit_all(elements, scope)

    # ---- environment ----------------------------------------------------------

    def tag_set_env(self, el: Element, scope: _Scope) -> None:
        def run() -> None:
            scope.environment[self.get(el, "name", scope)] = self.get(el, "value", scope)

        self.best_effort(run) if self.describing else run()

    def tag_unset_env(self, el: Element, scope: _Scope) -> None:
        self.best_effort(lambda: scope.environment.pop(self.get(el, "name", scope), None))

    def tag_append_env(self, el: Element, scope: _Scope) -> None:
        def run() -> None:
            name, value = self.get(el, "name", scope), self.get(el, "value", scope)
            prepend = self.get_typed(el, "prepend", scope, False)
            separator = self.get(el, "separator", scope, os.pathsep)
            old = scope.environment.get(name)
            scope.environment[name] = (
                value if old is None else (value + separator + old if prepend else old + separator + value)
            )

        self.best_effort(run) if self.describing else run()

    def tag_reset_env(self, el: Element, scope: _Scope) -> None:
        scope.environment.clear()
        scope.environment.update(self.initial_environment)

    # ---- messages and shutdown --------------------------------------------------

    def tag_log(self, el: Element, scope: _Scope) -> None:
        if not self.describing:
            self.plan.items.append(LogMessage(self.get(el, "message", scope), scope.delay_s, el.where))

    def tag_shutdown(self, el: Element, scope: _Scope) -> None:
        if not self.describing:
            reason = self.get(el, "reason", scope) or "reason not given"
            self.plan.items.append(ShutdownRequest(reason, scope.delay_s, el.where, scope.cancel_on_shutdown))

    # ---- launch_ros scope --------------------------------------------------------

    def tag_push_ros_namespace(self, el: Element, scope: _Scope) -> None:
        def run() -> None:
            previous = scope.configurations.get("ros_namespace")
            namespace = make_namespace_absolute(prefix_namespace(previous, self.get(el, "namespace", scope)))
            problem = namespace_problem(namespace or "")
            if problem:
                raise self.error(el, "namespace", f"the resulting namespace '{namespace}' {problem}")
            scope.configurations["ros_namespace"] = namespace

        self.best_effort(run) if self.describing else run()

    def _extend(self, el: Element, scope: _Scope, key: str, item: Any) -> None:
        """launch_ros appends to the list in place: one shared with an enclosing scope leaks out of it."""
        items = scope.configurations.get(key, [])
        if id(items) in scope.shared and not self.describing:
            self.warn(
                f"{el.where}: <{el.tag}> also applies after the enclosing <group> ends, as under ros2 launch "
                f"(an earlier <{el.tag}> outside the group made the list it extends); put both inside groups "
                "to scope them"
            )
        items.append(item)
        scope.configurations[key] = items

    def tag_set_parameter(self, el: Element, scope: _Scope) -> None:
        if self.describing:
            return
        name = self.get(el, "name", scope)
        try:
            value = param_value(el.attrib["value"], lambda t: evaluate(t, self.ctx(scope)), substituted=True)
        except LaunchError as exc:
            raise self.error(el, "value", f"parameter '{name}': {exc}") from None
        self._extend(el, scope, "global_params", (name, value))

    def tag_set_parameters_from_file(self, el: Element, scope: _Scope) -> None:
        if self.describing:
            return
        path = self.resolve_path(el, "filename", scope)
        if not path.is_file():  # upstream asserts it when the node starts
            raise self.error(el, "filename", f"parameter file '{path}' does not exist")
        self._extend(el, scope, "global_params", str(path))

    def tag_set_remap(self, el: Element, scope: _Scope) -> None:
        if not self.describing:
            self._extend(el, scope, "ros_remaps", (self.get(el, "from", scope), self.get(el, "to", scope)))

    # ---- processes ----------------------------------------------------------

    def tag_executable(self, el: Element, scope: _Scope) -> None:
        if self.describing:
            return
        cmd = self.command_line(el, "cmd", scope)
        self.add_process(el, scope, cmd, self.get(el, "name", scope))

    def tag_node(self, el: Element, scope: _Scope) -> None:
        if self.describing:
            return
        package = self.get(el, "pkg", scope)
        executable = self.get(el, "exec", scope)
        name = self.get(el, "name", scope)
        if name is not None and node_name_problem(name):
            raise self.error(el, "name", f"invalid node name '{name}': {node_name_problem(name)}")
        namespace = make_namespace_absolute(
            prefix_namespace(scope.configurations.get("ros_namespace"), self.get(el, "namespace", scope))
        )
        problem = namespace and namespace_problem(namespace)
        if problem:
            raise self.error(el, "namespace", f"namespace '{namespace}' {problem}")
        path = executable
        if package is not None:
            try:
                path = packages.find_node_executable(package, executable)
            except LaunchError as exc:
                raise self.error(el, "exec", f"node '{name or executable}': {exc}") from None
        # launch_ros' layout: user arguments, user ROS arguments, then the generated ROS arguments.
        cmd = [path, *(self.command_line(el, "args", scope) if "args" in el.values else [])]
        if "ros_args" in el.values:
            cmd += ["--ros-args", *self.command_line(el, "ros_args", scope)]
        cmd.append("--ros-args")
        if name is not None:
            cmd += ["-r", f"__node:={name}"]
        if namespace is not None:
            cmd += ["-r", f"__ns:={namespace}"]
        # A parameter file names the node when both name and namespace are known, else '/**'.
        node_key = f"{namespace.rstrip('/')}/{name}" if name is not None and namespace is not None else "/**"
        params: list[ParamFile] = []
        for item in scope.configurations.get("global_params", []) or []:
            if isinstance(item, tuple):
                params.append(ParamFile(f"{item[0]}:={_rule_text(item[1])}", rule=True, values={item[0]: item[1]}))
            else:
                params.append(ParamFile(item))
        label_stem = os.path.basename(name or executable)
        for param in (c for c in el.children if c.tag == "param"):
            params.extend(self.node_param(param, scope, node_key, label_stem))
        for entry in params:
            cmd += ["-p", entry.path] if entry.rule else ["--params-file", entry.path]
        remappings = list(scope.configurations.get("ros_remaps", []) or [])
        remappings += [(self.get(r, "from", scope), self.get(r, "to", scope)) for r in el.children if r.tag == "remap"]
        for src, dst in remappings:
            cmd += ["-r", f"{src}:={dst}"]
        node = NodeInfo(
            package=package,
            executable=executable,
            name=name,
            namespace=namespace,
            params_files=params,
            remappings=remappings,
        )
        self.add_process(el, scope, cmd, self.get(el, "exec_name", scope), node)

    def node_param(self, param: Element, scope: _Scope, node_key: str, stem: str) -> list[ParamFile]:
        if "from" in param.values:
            path = self.resolve_path(param, "from", scope)
            if self.get_typed_param_bool(param, scope):
                # allow_substs: the file's text is a template, as upstream's ParameterFile.
                try:
                    text = path.read_text(encoding="utf-8")
                except OSError as exc:
                    raise self.error(param, "from", f"parameter file '{path}': {exc.strerror}") from None
                try:
                    text = evaluate(parse_template(text), self.ctx(scope))
                except LaunchError as exc:
                    raise self.error(param, "from", f"'{path}': {exc}") from None
                generated = self.generated_file(path.stem)
                generated.write_text(text, encoding="utf-8")
                return [ParamFile(str(generated), generated=True)]
            if not path.is_file():
                self.warn(f"{param.where}: Parameter file path is not a file: {path} (skipped, as ros2 launch does)")
                return []
            return [ParamFile(str(path))]
        values = self.inline_param(param, scope, "")
        generated = self.generated_file(f"{stem}_params")
        write_params_file(generated, values, node_key)
        return [ParamFile(str(generated), generated=True, values=values)]

    def get_typed_param_bool(self, param: Element, scope: _Scope) -> bool:
        value = param.values.get("allow_substs")
        if value is None or isinstance(value, bool):
            return bool(value)
        text = self.get(param, "allow_substs", scope)
        try:
            return to_bool(text, "allow_substs")
        except LaunchError as exc:
            raise self.error(param, "allow_substs", str(exc)) from None

    def inline_param(self, param: Element, scope: _Scope, prefix: str) -> dict[str, Any]:
        name = prefix + self.get(param, "name", scope)
        if param.children:
            values: dict[str, Any] = {}
            for child in param.children:
                values.update(self.inline_param(child, scope, name + "."))
            return values
        try:
            value = param_value(
                param.attrib["value"],
                lambda t: evaluate(t, self.ctx(scope)),
                param.values.get("value-sep"),
                param.values.get("type"),
            )
        except LaunchError as exc:
            raise self.error(param, "value", f"parameter '{name}': {exc}") from None
        return {name: value}

    def add_process(
        self, el: Element, scope: _Scope, cmd: list[str], name: str | None, node: NodeInfo | None = None
    ) -> None:
        configurations = scope.configurations
        if "launch-prefix" in el.values:  # the attribute wins over the launch-prefix configuration
            prefix, apply = self.get(el, "launch-prefix", scope), True
        else:
            prefix = str(configurations.get("launch-prefix", ""))
            prefix_filter = str(configurations.get("launch-prefix-filter", ""))
            apply = re.match(prefix_filter, os.path.basename(cmd[0])) is not None
        if apply and prefix:
            try:
                cmd = shlex.split(prefix) + cmd
            except ValueError as exc:
                raise self.error(el, "launch-prefix", str(exc)) from None
        env = dict(scope.environment)
        for var in (c for c in el.children if c.tag == "env"):
            env[self.get(var, "name", scope)] = self.get(var, "value", scope)
        output = os.environ.get("OVERRIDE_LAUNCH_PROCESS_OUTPUT") or self.get(el, "output", scope, "log")
        if output not in OUTPUTS:
            raise self.error(el, "output", f"{output!r} is not a valid output configuration ({', '.join(OUTPUTS)})")
        emulate_tty = el.values.get("emulate_tty", False)
        if "emulate_tty" in configurations:  # the configuration wins over the attribute
            try:
                emulate_tty = evaluate_condition(str(configurations["emulate_tty"]))
            except LaunchError as exc:
                raise self.error(el, None, f"launch configuration 'emulate_tty': {exc}") from None
        respawn = self.get(el, "respawn", scope)
        try:
            respawn = to_bool(respawn, "respawn") if respawn is not None else False
            timeouts = [
                el.values.get(k, _config_float(configurations, k)) for k in ("sigterm_timeout", "sigkill_timeout")
            ]
        except LaunchError as exc:
            raise self.error(el, "respawn" if "respawn" in str(exc) else None, str(exc)) from None
        self.plan.items.append(
            ProcessSpec(
                label=self.next_label(name or os.path.basename(cmd[0])),
                cmd=cmd,
                env=env,
                cwd=self.get(el, "cwd", scope),
                shell=el.values.get("shell", False),
                output=output,
                emulate_tty=emulate_tty,
                delay_s=scope.delay_s,
                cancel_on_shutdown=scope.cancel_on_shutdown,
                on_exit_shutdown=el.values.get("on_exit") == "shutdown",
                respawn=respawn,
                respawn_delay=el.values.get("respawn_delay", 0.0),
                respawn_max_retries=el.values.get("respawn_max_retries", -1),
                sigterm_timeout=timeouts[0],
                sigkill_timeout=timeouts[1],
                node=node,
                source=el.where,
            )
        )


def _rule_text(value: Any) -> str:
    """``-p name:=value`` as launch_ros writes it: Python's str() of the value (a list as a tuple)."""
    return str(tuple(value)) if isinstance(value, list) else str(value)


def _config_float(configurations: Mapping[str, Any], name: str) -> float:
    # Upstream's sigterm_timeout/sigkill_timeout default to these launch configurations (5 s).
    value = configurations.get(name, 5)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise LaunchError(f"launch configuration '{name}' must be a number, got {value!r}") from None


# ------------------------------------------------------------------ public entry points


def _absolute(path: str | os.PathLike) -> Path:
    # abspath, not resolve(): $(dirname)/$(filename) should show the path as given.
    return Path(os.path.abspath(os.fspath(path)))


def _walk(path: str | os.PathLike, launch_args: Mapping[str, str] | None, describing: bool) -> LaunchPlan:
    launch_file = _absolute(path)
    if not launch_file.is_file():
        raise LaunchError(f"{launch_file}: launch file does not exist")
    plan = LaunchPlan(launch_file=launch_file, log_dir=default_log_dir())
    resolver = _Resolver(plan, describing)
    scope = _Scope(
        configurations={str(k): str(v) for k, v in (launch_args or {}).items()},
        environment=dict(os.environ),
        launch_file=launch_file,
    )
    try:
        resolver.run_file(launch_file, scope)
        resolver.run_timers(scope)
    except BaseException:
        plan.cleanup()
        raise
    plan.configurations = scope.configurations
    return plan


def parse_launch_file(path: str | os.PathLike, launch_args: Mapping[str, str] | None = None) -> LaunchPlan:
    """Resolve an XML launch file into the ordered items it runs (processes, log messages, shutdowns).

    *launch_args* are the ``name:=value`` pairs of the command line; they are set as launch
    configurations before the file runs, as ``ros2 launch`` does. Raises :class:`LaunchError` naming
    the file, line, tag and attribute for any invalid file, tag, attribute or argument.
    """
    return _walk(path, launch_args, describing=False)


def describe_arguments(path: str | os.PathLike, launch_args: Mapping[str, str] | None = None) -> list[LaunchArgument]:
    """List declared arguments without running the file (``ros2 launch --show-args``).

    The same walker in describing mode: ``<arg>`` tags are collected through groups, timers and
    includes whose ``file`` can be evaluated from the given arguments and the defaults seen so far;
    arguments under an if/unless or a timer are marked conditional. Defaults are reported unevaluated.
    The file is checked as for a run: a typo fails here too.
    """
    plan = _walk(path, launch_args, describing=True)
    plan.cleanup()
    return plan.arguments
