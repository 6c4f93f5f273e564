# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Resolve a ROS 2 XML launch file into a :class:`LaunchPlan`.

Follows the XML frontend of ``launch`` / ``launch_ros`` (tag and attribute
names, argument, condition, group, namespace, parameter and remapping
semantics). Actions are executed immediately, in document order, against a
scope that plays the role of upstream's launch context: launch
configurations, environment, pushed ROS namespace, global parameters and
global remappings.

Deliberate differences from upstream:

* ``<include>`` is scoped: arguments, ``<let>``, ``<set_env>``, namespaces etc.
  set inside an included file (or by its ``<arg>`` children) do not leak back
  into the including file. Upstream leaks them unless wrapped in a
  ``<group>``, which is a well-known trap.
* relative ``<include file>`` and ``<param from>`` paths are tried against the
  working directory first (upstream) and then the including file's directory.
* a ``<param from>`` file that does not exist is an error, not a warning.
* unknown attributes on action tags produce a warning (upstream ignores them);
  unknown tags are errors.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import packages, xmlfile
from .errors import LaunchError
from .model import LaunchArgument, LaunchPlan, NodeInfo, ParamFile, ProcessSpec
from .namespaces import (
    make_namespace_absolute,
    namespace_problem,
    node_name_problem,
    prefix_namespace,
)
from .params import ParamItem, build_params_files, typed_value, write_params_file
from .substitutions import (
    EvalContext,
    evaluate_condition,
    parse_template,
    split_command_line,
    substitute,
    to_bool,
)
from .xmlfile import Element

_MAX_INCLUDE_DEPTH = 32
_CONDITIONS = frozenset({'if', 'unless'})
_PROCESS_ATTRS = frozenset({
    'cwd', 'launch-prefix', 'output', 'respawn', 'respawn_delay', 'respawn_max_retries',
    'on_exit', 'sigterm_timeout', 'sigkill_timeout', 'shell', 'emulate_tty'})
# Attributes each action accepts (besides if/unless). Upstream attributes that
# make no difference here (emulate_tty, node-name) are accepted and ignored.
_ACTION_ATTRS: Dict[str, frozenset] = {
    'arg': frozenset({'name', 'default', 'description'}),
    'let': frozenset({'name', 'value'}),
    'include': frozenset({'file'}),
    'group': frozenset({'scoped', 'forwarding'}),
    'push-ros-namespace': frozenset({'namespace'}),
    'push_ros_namespace': frozenset({'namespace'}),
    'set_env': frozenset({'name', 'value'}),
    'unset_env': frozenset({'name'}),
    'append_env': frozenset({'name', 'value', 'prepend', 'separator'}),
    'set_parameter': frozenset({'name', 'value'}),
    'set_parameters_from_file': frozenset({'filename'}),
    'set_remap': frozenset({'from', 'to'}),
    'executable': _PROCESS_ATTRS | {'cmd', 'name'},
    'node': _PROCESS_ATTRS | {'pkg', 'exec', 'name', 'namespace', 'args', 'ros_args',
                              'exec_name', 'node-name'},
}
#: Tags accepted as actions, for error messages.
ACTION_TAGS = tuple(sorted(_ACTION_ATTRS))

# ------------------------------------------------------------------ scope

@dataclass
class _Scope:
    """The parts of upstream's launch context that actions read and write."""

    configurations: Dict[str, str]
    environment: Dict[str, str]
    launch_file: Path
    ros_namespace: Optional[str] = None
    global_params: List[ParamItem] = field(default_factory=list)
    remaps: List[Tuple[str, str]] = field(default_factory=list)

    def copy(self) -> '_Scope':
        return replace(self, configurations=dict(self.configurations),
                       environment=dict(self.environment),
                       global_params=list(self.global_params), remaps=list(self.remaps))


def _describe_argument(description: Optional[str], choices: Optional[List[str]]) -> str:
    # Same text as upstream DeclareLaunchArgument.description.
    if description is None:
        return 'no description given' if choices is None else f'One of: {choices}'
    if choices is None:
        return description
    return (description if description.endswith('.') else description + '.') + \
        f' Valid choices are: {choices}'


def _choices(el: Element) -> Optional[List[str]]:
    choices = []
    for child in (c for c in el.children if c.tag == 'choice'):
        if 'value' not in child.attrib or set(child.attrib) != {'value'}:
            raise LaunchError(f"{child.where}: <choice> takes exactly one attribute, 'value'")
        choices.append(child.attrib['value'])
    return choices or None


# ------------------------------------------------------------------ resolver

class _Resolver:
    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.initial_environment = dict(os.environ)
        self.anon_names: Dict[str, str] = {}
        self.process_count = 0
        self.generated_count = 0
        self.include_depth = 0
        self.argument_names: set = set()

    # ---- helpers ------------------------------------------------------------

    def ctx(self, scope: _Scope) -> EvalContext:
        return EvalContext(scope.configurations, scope.environment, scope.launch_file,
                           self.anon_names)

    @staticmethod
    def error(el: Element, attr: Optional[str], message: str) -> LaunchError:
        where = f'{el.where}: <{el.tag}>' + (f" attribute '{attr}'" if attr else '')
        return LaunchError(f'{where}: {message}')

    def substitute(self, el: Element, attr: str, text: str, scope: _Scope) -> str:
        try:
            return substitute(text, self.ctx(scope))
        except LaunchError as exc:
            raise self.error(el, attr, str(exc)) from None

    def get(self, el: Element, attr: str, scope: _Scope, *,
            required: bool = False) -> Optional[str]:
        """Evaluated attribute value, None when absent (an error when required)."""
        if attr not in el.attrib:
            if required:
                raise self.error(el, attr, 'missing required attribute')
            return None
        return self.substitute(el, attr, el.attrib[attr], scope)

    def get_bool(self, el: Element, attr: str, scope: _Scope, default: bool) -> bool:
        value = self.get(el, attr, scope)
        if value is None:
            return default
        try:
            return to_bool(value, attr)
        except LaunchError as exc:
            raise self.error(el, attr, str(exc)) from None

    def get_number(self, el: Element, attr: str, scope: _Scope, kind: type,
                   default: Any, minimum: Optional[float] = None) -> Any:
        value = self.get(el, attr, scope)
        if value is None:
            return default
        try:
            number = kind(value)
        except ValueError:
            raise self.error(el, attr, f'expected {kind.__name__}, got {value!r}') from None
        if minimum is not None and number < minimum:
            raise self.error(el, attr, f'must be >= {minimum}, got {value!r}')
        return number

    def command_line(self, el: Element, attr: str, scope: _Scope) -> List[str]:
        if attr not in el.attrib:
            return []
        try:
            return split_command_line(parse_template(el.attrib[attr]), self.ctx(scope))
        except LaunchError as exc:
            raise self.error(el, attr, str(exc)) from None

    def check_attributes(self, el: Element, allowed: Iterable[str], *, strict: bool) -> None:
        unknown = [name for name in el.attrib if name not in allowed]
        if not unknown:
            return
        message = f"{el.where}: <{el.tag}> has unknown attribute(s) {', '.join(unknown)}"
        if strict:
            raise LaunchError(message)
        self.plan.warnings.append(f'{message} (ignored)')

    @staticmethod
    def check_children(el: Element, allowed: Iterable[str]) -> None:
        allowed = set(allowed)
        for child in el.children:
            if child.tag not in allowed:
                expected = ', '.join(f'<{tag}>' for tag in sorted(allowed)) or 'none'
                raise LaunchError(f'{child.where}: unknown tag <{child.tag}> inside <{el.tag}> '
                                  f'(allowed: {expected})')

    @staticmethod
    def resolve_path(value: str, scope: _Scope) -> Path:
        path = Path(value).expanduser()
        if path.is_absolute():
            return path
        from_cwd = Path.cwd() / path
        if from_cwd.exists():
            return from_cwd
        from_file = scope.launch_file.parent / path
        return from_file if from_file.exists() else from_cwd

    def config_float(self, scope: _Scope, name: str, default: float) -> float:
        # Upstream's sigterm_timeout/sigkill_timeout default to these launch configurations.
        value = scope.configurations.get(name)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise LaunchError(f"launch configuration '{name}' must be a number, "
                              f'got {value!r}') from None

    def next_label(self, base: str) -> str:
        self.process_count += 1
        return f'{base}-{self.process_count}'

    def generated_file(self, stem: str) -> Path:
        if self.plan.params_dir is None:
            self.plan.params_dir = Path(tempfile.mkdtemp(prefix='vla_ros_launch_'))
        self.generated_count += 1
        return self.plan.params_dir / f'{stem}_{self.generated_count}.yaml'

    # ---- traversal ----------------------------------------------------------

    def run_file(self, path: Path, scope: _Scope) -> None:
        root = xmlfile.load(path)
        if root.tag != 'launch':
            raise LaunchError(f'{root.where}: the root tag must be <launch>, not <{root.tag}>')
        self.visit_all(root.children, scope)

    def visit_all(self, elements: Iterable[Element], scope: _Scope) -> None:
        for el in elements:
            self.visit(el, scope)

    def visit(self, el: Element, scope: _Scope) -> None:
        handler = getattr(self, 'tag_' + el.tag.replace('-', '_'), None)
        if el.tag not in _ACTION_ATTRS or handler is None:
            raise LaunchError(f'{el.where}: unknown tag <{el.tag}> '
                              f"(supported: {', '.join(ACTION_TAGS)})")
        self.check_attributes(el, _ACTION_ATTRS[el.tag] | _CONDITIONS, strict=False)
        if self.condition_holds(el, scope):
            handler(el, scope)

    def condition_holds(self, el: Element, scope: _Scope) -> bool:
        if 'if' in el.attrib and 'unless' in el.attrib:
            raise self.error(el, 'if', "'if' and 'unless' cannot be used together")
        for attr, wanted in (('if', True), ('unless', False)):
            if attr in el.attrib:
                value = self.get(el, attr, scope)
                assert value is not None
                try:
                    return evaluate_condition(value) is wanted
                except LaunchError as exc:
                    raise self.error(el, attr, str(exc)) from None
        return True

    # ---- launch configuration tags -----------------------------------------

    def tag_arg(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, {'choice'})
        if 'name' not in el.attrib:
            raise self.error(el, 'name', 'missing required attribute')
        name = el.attrib['name']  # names are plain text upstream, never substituted
        choices = _choices(el)
        description = _describe_argument(el.attrib.get('description'), choices)
        if name not in scope.configurations:
            if 'default' not in el.attrib:
                raise self.error(el, 'name', f"required launch argument '{name}' was not "
                                 f"provided (description: '{description}')")
            scope.configurations[name] = self.get(el, 'default', scope) or ''
        value = scope.configurations[name]
        if choices is not None and value not in choices:
            raise self.error(el, 'name', f"argument '{name}' got {value!r}, which is not one "
                             f'of the valid choices {choices}')
        if name not in self.argument_names:
            self.argument_names.add(name)
            self.plan.arguments.append(LaunchArgument(
                name=name, default=el.attrib.get('default'), description=description,
                choices=choices, value=value, source=el.where))

    def tag_let(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        name = self.get(el, 'name', scope, required=True)
        scope.configurations[name] = self.get(el, 'value', scope, required=True)

    def tag_include(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, {'arg'})
        path = self.resolve_path(self.get(el, 'file', scope, required=True), scope)
        if not path.is_file():
            raise self.error(el, 'file', f"launch file '{path}' does not exist")
        if path.suffix in ('.py', '.yaml', '.yml'):
            raise self.error(el, 'file', f"'{path}': only XML launch files are supported")
        inner = scope.copy()
        for arg in el.children:
            self.check_attributes(arg, {'name', 'value'}, strict=True)
            name = self.get(arg, 'name', inner, required=True)
            inner.configurations[name] = self.get(arg, 'value', inner, required=True)
        inner.launch_file = path
        if self.include_depth >= _MAX_INCLUDE_DEPTH:
            raise self.error(el, 'file', 'includes nested too deeply (recursive include?)')
        self.include_depth += 1
        try:
            self.run_file(path, inner)
        except LaunchError as exc:
            raise LaunchError(f'{exc}\n  (included from {el.where})') from None
        finally:
            self.include_depth -= 1

    def tag_group(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, set(_ACTION_ATTRS) | {'keep'})
        scoped = self.get_bool(el, 'scoped', scope, True)
        forwarding = self.get_bool(el, 'forwarding', scope, True)
        keeps = []
        for keep in (c for c in el.children if c.tag == 'keep'):
            self.check_attributes(keep, {'name', 'value'}, strict=True)
            keeps.append((self.get(keep, 'name', scope, required=True),
                          self.get(keep, 'value', scope, required=True)))
        inner = scope.copy() if scoped else scope
        if scoped and not forwarding:
            # Upstream resets the launch configurations (where the ROS namespace,
            # global params and remaps also live) and the environment.
            inner = _Scope({}, dict(self.initial_environment), scope.launch_file)
        inner.configurations.update(keeps)
        self.visit_all((c for c in el.children if c.tag != 'keep'), inner)

    # ---- environment tags ---------------------------------------------------

    def tag_set_env(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        name = self.get(el, 'name', scope, required=True)
        scope.environment[name] = self.get(el, 'value', scope, required=True)

    def tag_unset_env(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        scope.environment.pop(self.get(el, 'name', scope, required=True), None)

    def tag_append_env(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        name = self.get(el, 'name', scope, required=True)
        value = self.get(el, 'value', scope, required=True)
        prepend = self.get_bool(el, 'prepend', scope, False)
        separator = self.get(el, 'separator', scope)
        separator = os.pathsep if separator is None else separator
        old = scope.environment.get(name)
        if old is None:
            scope.environment[name] = value
        else:
            scope.environment[name] = value + separator + old if prepend \
                else old + separator + value

    # ---- ROS scope tags -----------------------------------------------------

    def tag_push_ros_namespace(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        pushed = self.get(el, 'namespace', scope, required=True)
        namespace = make_namespace_absolute(prefix_namespace(scope.ros_namespace, pushed))
        problem = namespace_problem(namespace or '')
        if problem:
            raise self.error(el, 'namespace', f"resulting namespace '{namespace}' {problem}")
        scope.ros_namespace = namespace

    def tag_set_parameter(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        name = self.get(el, 'name', scope, required=True)
        value = self.get(el, 'value', scope, required=True)
        try:
            scope.global_params.append({name: typed_value(value)})
        except LaunchError as exc:
            raise self.error(el, 'value', str(exc)) from None

    def tag_set_parameters_from_file(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        path = self.resolve_path(self.get(el, 'filename', scope, required=True), scope)
        if not path.is_file():
            raise self.error(el, 'filename', f"parameter file '{path}' does not exist")
        scope.global_params.append(ParamFile(str(path)))

    def tag_set_remap(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, ())
        scope.remaps.append((self.get(el, 'from', scope, required=True),
                             self.get(el, 'to', scope, required=True)))

    # ---- processes ----------------------------------------------------------

    def tag_executable(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, {'env'})
        if 'cmd' not in el.attrib:
            raise self.error(el, 'cmd', 'missing required attribute')
        cmd = self.command_line(el, 'cmd', scope)
        if not cmd:
            raise self.error(el, 'cmd', 'empty command')
        base = self.get(el, 'name', scope) or os.path.basename(cmd[0])
        self.add_process(el, scope, self.next_label(base), cmd)

    def tag_node(self, el: Element, scope: _Scope) -> None:
        self.check_children(el, {'param', 'remap', 'env'})
        package = self.get(el, 'pkg', scope)
        executable = self.get(el, 'exec', scope, required=True)
        assert executable is not None
        name = self.get(el, 'name', scope)
        if name is not None and node_name_problem(name):
            raise self.error(el, 'name', f"invalid node name '{name}': "
                             f'{node_name_problem(name)}')
        namespace = make_namespace_absolute(
            prefix_namespace(scope.ros_namespace, self.get(el, 'namespace', scope)))
        problem = namespace and namespace_problem(namespace)
        if problem:
            raise self.error(el, 'namespace', f"namespace '{namespace}' {problem}")
        try:
            path = packages.find_node_executable(package, executable,
                                                 scope.environment.get('PATH'))
        except LaunchError as exc:
            raise self.error(el, 'exec', f"node '{name or executable}': {exc}") from None
        label = self.next_label(self.get(el, 'exec_name', scope) or os.path.basename(executable))
        params_files = build_params_files(
            [*scope.global_params, *self.node_params(el, scope)],
            lambda values: self.write_inline_params(label, values))
        remappings = list(scope.remaps)
        for remap in (c for c in el.children if c.tag == 'remap'):
            self.check_attributes(remap, {'from', 'to'}, strict=True)
            self.check_children(remap, ())
            remappings.append((self.get(remap, 'from', scope, required=True),
                               self.get(remap, 'to', scope, required=True)))

        # Same layout as launch_ros: user arguments, user ROS arguments, then
        # the launch-generated ROS arguments in their own --ros-args block.
        cmd = [path, *self.command_line(el, 'args', scope)]
        ros_args = self.command_line(el, 'ros_args', scope)
        if ros_args:
            cmd += ['--ros-args', *ros_args]
        cmd.append('--ros-args')
        if name is not None:
            cmd += ['-r', f'__node:={name}']
        if namespace is not None:
            cmd += ['-r', f'__ns:={namespace}']
        for params_file in params_files:
            cmd += ['--params-file', params_file.path]
        for src, dst in remappings:
            cmd += ['-r', f'{src}:={dst}']
        node = NodeInfo(package=package, executable=executable, name=name,
                        namespace=namespace, params_files=params_files,
                        remappings=remappings)
        self.add_process(el, scope, label, cmd, node)

    def write_inline_params(self, label: str, values: Dict[str, Any]) -> str:
        path = self.generated_file(f'{label}_params')
        write_params_file(path, values)
        return str(path)

    def node_params(self, el: Element, scope: _Scope) -> List[ParamItem]:
        items: List[ParamItem] = []
        for param in (c for c in el.children if c.tag == 'param'):
            if 'from' in param.attrib and 'name' in param.attrib:
                raise self.error(param, 'from', "'name' and 'from' are mutually exclusive")
            if 'from' in param.attrib:
                items.append(self.params_from_file(param, scope))
            elif 'name' in param.attrib:
                items.append(self.inline_param(param, scope, ''))
            else:
                raise self.error(param, None, "needs a 'name' or a 'from' attribute")
        return items

    def params_from_file(self, param: Element, scope: _Scope) -> ParamFile:
        self.check_attributes(param, {'from', 'allow_substs'}, strict=True)
        self.check_children(param, ())
        path = self.resolve_path(self.get(param, 'from', scope, required=True), scope)
        if not path.is_file():
            raise self.error(param, 'from', f"parameter file '{path}' does not exist")
        if not self.get_bool(param, 'allow_substs', scope, False):
            return ParamFile(str(path))
        # allow_substs: the file's text is a template, as upstream's ParameterFile.
        text = self.substitute(param, 'from', path.read_text(encoding='utf-8'), scope)
        generated = self.generated_file(path.stem)
        generated.write_text(text, encoding='utf-8')
        return ParamFile(str(generated), generated=True)

    def inline_param(self, param: Element, scope: _Scope, prefix: str) -> Dict[str, Any]:
        self.check_attributes(param, {'name', 'value', 'value-sep', 'type'}, strict=True)
        self.check_children(param, {'param'})
        name = prefix + (self.get(param, 'name', scope, required=True) or '')
        if param.children:
            if 'value' in param.attrib or 'type' in param.attrib:
                raise self.error(param, 'value', "nested <param> tags and 'value'/'type' "
                                 'are mutually exclusive')
            values: Dict[str, Any] = {}
            for child in param.children:
                values.update(self.inline_param(child, scope, name + '.'))
            return values
        if 'value' not in param.attrib:
            raise self.error(param, 'value', 'needs a value or nested <param> tags')
        raw = param.attrib['value']
        value: Union[str, List[str]]
        if 'value-sep' in param.attrib:
            separator = param.attrib['value-sep']
            if not separator:
                raise self.error(param, 'value-sep', 'must not be empty')
            value = [self.substitute(param, 'value', item, scope)
                     for item in raw.split(separator)]
        else:
            value = self.substitute(param, 'value', raw, scope)
        try:
            return {name: typed_value(value, param.attrib.get('type'))}
        except LaunchError as exc:
            raise self.error(param, 'value', f"parameter '{name}': {exc}") from None

    def add_process(self, el: Element, scope: _Scope, label: str, cmd: List[str],
                    node: Optional[NodeInfo] = None) -> None:
        prefix = self.get(el, 'launch-prefix', scope)
        if prefix:
            try:
                cmd = shlex.split(prefix) + cmd
            except ValueError as exc:
                raise self.error(el, 'launch-prefix', str(exc)) from None
        env = dict(scope.environment)
        for var in (c for c in el.children if c.tag == 'env'):
            self.check_attributes(var, {'name', 'value'}, strict=True)
            self.check_children(var, ())
            env[self.get(var, 'name', scope, required=True) or ''] = \
                self.get(var, 'value', scope, required=True) or ''
        on_exit = self.get(el, 'on_exit', scope)
        if on_exit not in (None, 'shutdown'):
            raise self.error(el, 'on_exit', f"only 'shutdown' is supported, got {on_exit!r}")
        try:
            sigterm_default = self.config_float(scope, 'sigterm_timeout', 5.0)
            sigkill_default = self.config_float(scope, 'sigkill_timeout', 5.0)
        except LaunchError as exc:
            raise self.error(el, None, str(exc)) from None
        self.plan.processes.append(ProcessSpec(
            label=label, cmd=cmd, env=env, cwd=self.get(el, 'cwd', scope),
            shell=self.get_bool(el, 'shell', scope, False),
            output=self.get(el, 'output', scope) or 'log',
            on_exit_shutdown=on_exit == 'shutdown',
            respawn=self.get_bool(el, 'respawn', scope, False),
            respawn_delay=self.get_number(el, 'respawn_delay', scope, float, 0.0, 0.0),
            respawn_max_retries=self.get_number(el, 'respawn_max_retries', scope, int, -1),
            sigterm_timeout=self.get_number(el, 'sigterm_timeout', scope, float,
                                            sigterm_default, 0.0),
            sigkill_timeout=self.get_number(el, 'sigkill_timeout', scope, float,
                                            sigkill_default, 0.0),
            node=node, source=el.where))


# ------------------------------------------------------------------ public entry points

def _absolute(path: Union[str, os.PathLike]) -> Path:
    # abspath, not resolve(): $(dirname)/$(filename) should show the path as given.
    return Path(os.path.abspath(os.fspath(path)))


def parse_launch_file(path: Union[str, os.PathLike],
                      launch_args: Optional[Mapping[str, str]] = None) -> LaunchPlan:
    """Resolve an XML launch file into a flat, ordered list of process specs.

    *launch_args* are the ``name:=value`` pairs of the command line; they are
    set as launch configurations before the file runs, as ``ros2 launch`` does.
    Raises :class:`LaunchError` for any invalid file, tag, attribute or argument.
    """
    launch_file = _absolute(path)
    if not launch_file.is_file():
        raise LaunchError(f"{launch_file}: launch file does not exist")
    plan = LaunchPlan(launch_file=launch_file)
    resolver = _Resolver(plan)
    scope = _Scope(configurations={str(k): str(v) for k, v in (launch_args or {}).items()},
                   environment=dict(os.environ), launch_file=launch_file)
    try:
        resolver.run_file(launch_file, scope)
    except BaseException:
        plan.cleanup()
        raise
    plan.configurations = scope.configurations
    return plan


def describe_arguments(path: Union[str, os.PathLike],
                       launch_args: Optional[Mapping[str, str]] = None) -> List[LaunchArgument]:
    """List declared arguments without running the file (``ros2 launch --show-args``).

    Like upstream this is best effort: ``<arg>`` tags are collected through
    groups and through includes whose ``file`` can be evaluated from the given
    arguments and the defaults seen so far; arguments under an if/unless are
    marked conditional. Defaults are reported unevaluated.
    """
    found: Dict[str, LaunchArgument] = {}
    configurations = {str(k): str(v) for k, v in (launch_args or {}).items()}

    def walk(file: Path, elements: List[Element], conditional: bool, depth: int) -> None:
        for el in elements:
            here = conditional or bool(_CONDITIONS & set(el.attrib))
            if el.tag == 'arg' and 'name' in el.attrib:
                name = el.attrib['name']
                configurations.setdefault(name, el.attrib.get('default', ''))
                if name not in found:
                    choices = _choices(el) if el.children else None
                    found[name] = LaunchArgument(
                        name=name, default=el.attrib.get('default'),
                        description=_describe_argument(el.attrib.get('description'), choices),
                        choices=choices, conditional=here, source=el.where)
            elif el.tag == 'group':
                walk(file, el.children, here, depth)
            elif el.tag == 'include' and 'file' in el.attrib and depth < _MAX_INCLUDE_DEPTH:
                scope = _Scope(dict(configurations), dict(os.environ), file)
                try:
                    included = _Resolver.resolve_path(
                        substitute(el.attrib['file'], EvalContext(
                            scope.configurations, scope.environment, file)), scope)
                    root = xmlfile.load(included)
                except LaunchError:
                    continue  # needs values only known at launch time: skipped, as upstream
                walk(included, root.children, here, depth + 1)

    launch_file = _absolute(path)
    root = xmlfile.load(launch_file)
    if root.tag != 'launch':
        raise LaunchError(f'{root.where}: the root tag must be <launch>, not <{root.tag}>')
    walk(launch_file, root.children, False, 0)
    return list(found.values())
