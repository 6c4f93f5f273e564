# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Parsing and evaluation of ``$(name arg ...)`` substitutions in attribute values.

Follows the ROS 2 launch frontend grammar (``launch/frontend/grammar.lark``):

* outside a substitution, ``\\x`` escapes any character (so ``\\$(`` is a
  literal ``$(``); a ``$`` not followed by ``(`` is plain text;
* arguments are separated by spaces; an argument is a run of plain
  characters and nested substitutions, or a ``'single'`` / ``"double"``
  quoted string that may itself contain substitutions. Parentheses inside an
  unquoted argument must be escaped (``\\(``) or the argument quoted.

The substitutions and their semantics follow ``launch`` and ``launch_ros``:
var, env, find-pkg-share, find-pkg-prefix, find-exec, exec-in-pkg, dirname,
filename, anon, eval, command, not, and, or, any, all, equals, not-equals, if;
plus ``optenv`` from ROS 1 (an ``env`` that never fails). ``eval`` is
restricted (see :func:`_safe_eval`), unlike upstream's plain ``eval``.

:func:`split_command_line` turns a ``cmd``/``args`` template into argv the
way ExecuteProcess does (see its docstring for the one difference).
"""

from __future__ import annotations

import ast
import builtins
import math
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, MutableMapping, Optional, Union

import yaml

from . import packages
from .errors import LaunchError


@dataclass(frozen=True)
class Substitution:
    """One parsed ``$(name args...)``; each argument is itself a template."""

    name: str
    args: tuple


#: A template is a list of literal text and substitutions, concatenated on evaluation.
Part = Union[str, Substitution]
Template = List[Part]


@dataclass
class EvalContext:
    """What substitutions can see while evaluating one attribute."""

    configurations: Mapping[str, str]
    environment: Mapping[str, str]
    launch_file: Optional[Path] = None
    #: Shared by the whole launch so ``$(anon x)`` is stable everywhere (as upstream).
    anon_names: MutableMapping[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- parsing

_IDENTIFIER = re.compile(r'[A-Za-z][A-Za-z0-9_-]*')
_ARG_SEPARATORS = ' \t\n\r'


class _Builder:
    """Accumulates parts, merging adjacent text so templates stay short."""

    def __init__(self) -> None:
        self.parts: Template = []

    def text(self, chars: str) -> None:
        if self.parts and isinstance(self.parts[-1], str):
            self.parts[-1] += chars
        else:
            self.parts.append(chars)

    def sub(self, substitution: Substitution) -> None:
        self.parts.append(substitution)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos]

    def starts_substitution(self) -> bool:
        return self.text.startswith('$(', self.pos)

    def fail(self, message: str) -> LaunchError:
        return LaunchError(f'{message} (at column {self.pos + 1} of {self.text!r})')


def parse_template(text: str) -> Template:
    """Parse an attribute value into literal text and substitutions."""
    reader = _Reader(text)
    out = _Builder()
    while not reader.at_end():
        _consume_one(reader, out)
    return out.parts


def _consume_one(reader: _Reader, out: _Builder) -> None:
    """One step of template text: an escaped character, a whole substitution, or a literal character."""
    text = reader.text
    char = reader.peek()
    if char == '\\' and reader.pos + 1 < len(text):
        out.text(text[reader.pos + 1])
        reader.pos += 2
    elif reader.starts_substitution():
        out.sub(_parse_substitution(reader))
    else:
        out.text(char)
        reader.pos += 1


def _parse_substitution(reader: _Reader) -> Substitution:
    start = reader.pos
    reader.pos += 2  # '$('
    match = _IDENTIFIER.match(reader.text, reader.pos)
    if match is None:
        raise reader.fail("expected a substitution name after '$('")
    name = match.group(0)
    reader.pos = match.end()
    args: List[Template] = []
    while True:
        if reader.at_end():
            reader.pos = start
            raise reader.fail(f"unterminated substitution '$({name}'")
        char = reader.peek()
        if char == ')':
            reader.pos += 1
            return Substitution(name, tuple(args))
        if char not in _ARG_SEPARATORS:
            raise reader.fail(f"expected ' ' or ')' in '$({name} ...)'")
        # Upstream accepts exactly one space between arguments; any run of
        # whitespace is accepted here (XML turns newlines into spaces anyway).
        while not reader.at_end() and reader.peek() in _ARG_SEPARATORS:
            reader.pos += 1
        if not reader.at_end() and reader.peek() != ')':
            args.append(_parse_argument(reader))


def _parse_argument(reader: _Reader) -> Template:
    out = _Builder()
    text = reader.text
    while not reader.at_end():
        char = reader.peek()
        if char in _ARG_SEPARATORS or char == ')':
            break
        if char == '\\' and reader.pos + 1 < len(text):
            out.text(text[reader.pos + 1])
            reader.pos += 2
        elif reader.starts_substitution():
            out.sub(_parse_substitution(reader))
        elif char in '\'"':
            _parse_quoted(reader, char, out)
        elif char == '(':
            raise reader.fail("unescaped '(' in a substitution argument: quote the argument "
                              "or write '\\('")
        else:
            out.text(char)
            reader.pos += 1
    if not out.parts:
        out.text('')  # a quoted empty string
    return out.parts


def _parse_quoted(reader: _Reader, quote: str, out: _Builder) -> None:
    start = reader.pos
    reader.pos += 1
    out.text('')  # '' is a real (empty) argument
    while True:
        if reader.at_end():
            reader.pos = start
            raise reader.fail(f'unterminated {quote} quote')
        char = reader.peek()
        if char == quote:
            reader.pos += 1
            return
        _consume_one(reader, out)


def has_substitutions(template: Template) -> bool:
    return any(isinstance(part, Substitution) for part in template)


# ------------------------------------------------------------------------ evaluation

def evaluate(template: Template, ctx: EvalContext) -> str:
    """Evaluate a parsed template to a string."""
    return ''.join(part if isinstance(part, str) else perform(part, ctx) for part in template)


def substitute(text: str, ctx: EvalContext) -> str:
    """Parse and evaluate *text* in one go."""
    return evaluate(parse_template(text), ctx)


def perform(sub: Substitution, ctx: EvalContext) -> str:
    handler = _HANDLERS.get(sub.name)
    if handler is None:
        raise LaunchError(
            f"unknown substitution '$({sub.name})' (known: {', '.join(sorted(_HANDLERS))})")
    return handler(ctx, list(sub.args))


def _nargs(name: str, args: list, low: int, high: Optional[int] = None) -> None:
    high = low if high is None else high
    if not low <= len(args) <= high:
        expected = str(low) if low == high else f'{low} to {high}'
        raise LaunchError(
            f"substitution '$({name})' expects {expected} argument(s), got {len(args)}")


def to_bool(value: str, what: str) -> bool:
    """Boolean coercion used by not/and/or/any/all/if (YAML rules, plus '1'/'0')."""
    text = value.strip()
    if text in ('1', '0'):
        return text == '1'
    try:
        loaded = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        loaded = None
    if isinstance(loaded, bool):
        return loaded
    raise LaunchError(f"{what}: expected a boolean (true/false/1/0), got {value!r}")


def _bool_text(value: bool) -> str:
    return 'true' if value else 'false'


def _lookup(kind: str, table: dict, ctx: EvalContext, args: list, missing: str | None) -> str:
    """Shared body of var/env/optenv: the value by name, else the default, else ``missing``."""
    _nargs(kind, args, 1, 2)
    name = evaluate(args[0], ctx)
    if name in table:
        return table[name]
    if len(args) == 2:
        return evaluate(args[1], ctx)
    if missing is None:
        return ''
    raise LaunchError(missing.format(name=name))


def _var(ctx: EvalContext, args: list) -> str:
    return _lookup('var', ctx.configurations, ctx, args, "launch configuration '{name}' does not exist")


def _env(ctx: EvalContext, args: list) -> str:
    return _lookup('env', ctx.environment, ctx, args, "environment variable '{name}' does not exist")


def _optenv(ctx: EvalContext, args: list) -> str:
    # ROS 1 compatibility: like env, but an unset variable without default is ''.
    return _lookup('optenv', ctx.environment, ctx, args, None)


def _find_pkg_share(ctx: EvalContext, args: list) -> str:
    _nargs('find-pkg-share', args, 1)
    return str(packages.find_package_share(evaluate(args[0], ctx)))


def _find_pkg_prefix(ctx: EvalContext, args: list) -> str:
    _nargs('find-pkg-prefix', args, 1)
    return str(packages.find_package_prefix(evaluate(args[0], ctx)))


def _find_exec(ctx: EvalContext, args: list) -> str:
    _nargs('find-exec', args, 1)
    name = evaluate(args[0], ctx)
    found = shutil.which(name, path=ctx.environment.get('PATH'))
    if found is None:
        raise LaunchError(f"executable '{name}' not found on the PATH")
    return found


def _exec_in_pkg(ctx: EvalContext, args: list) -> str:
    _nargs('exec-in-pkg', args, 2)
    executable, package = evaluate(args[0], ctx), evaluate(args[1], ctx)
    return packages.find_node_executable(package, executable, ctx.environment.get('PATH'))


def _launch_file(ctx: EvalContext, name: str) -> Path:
    if ctx.launch_file is None:
        raise LaunchError(f"'$({name})' used outside of a launch file")
    return ctx.launch_file


def _dirname(ctx: EvalContext, args: list) -> str:
    _nargs('dirname', args, 0)
    return str(_launch_file(ctx, 'dirname').parent)


def _filename(ctx: EvalContext, args: list) -> str:
    _nargs('filename', args, 0)
    return str(_launch_file(ctx, 'filename'))


def _anon(ctx: EvalContext, args: list) -> str:
    _nargs('anon', args, 1)
    name = evaluate(args[0], ctx)
    if name not in ctx.anon_names:
        raw = f'{name}_{socket.gethostname()}_{os.getpid()}_{random.randint(0, sys.maxsize)}'
        # Same character clean-up as upstream so the result is a valid node name.
        ctx.anon_names[name] = re.sub(r'[.:-]', '_', raw)
    return ctx.anon_names[name]


# Builtins that cannot reach the file system, the network or interpreter internals.
_SAFE_BUILTINS = {name: getattr(builtins, name)
                  for name in ('abs', 'all', 'any', 'bool', 'dict', 'divmod', 'enumerate',
                               'float', 'int', 'len', 'list', 'max', 'min', 'pow', 'range',
                               'reversed', 'round', 'sorted', 'str', 'sum', 'tuple', 'zip')}
_MATH_NAMES = {name: value for name, value in vars(math).items() if not name.startswith('_')}


def _safe_eval(expression: str, modules: List[str]) -> object:
    """Evaluate a Python expression with math only.

    Upstream evaluates with the full builtins plus the ``math`` names; here the
    names are math's plus a few pure builtins, other modules are refused, and
    names/attributes starting with ``_`` are rejected so ``().__class__``-style
    escapes are impossible. Launch files are code, but pip mode should not turn
    a typo in a launch argument into arbitrary code execution.
    """
    for module in modules:
        if module != 'math':
            raise LaunchError(f"eval: module '{module}' is not available (only 'math')")
    try:
        tree = ast.parse(expression.strip(), mode='eval')
    except SyntaxError as exc:
        raise LaunchError(f'eval: invalid expression {expression!r}: {exc.msg}') from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith('_'):
            raise LaunchError(f"eval: access to '{node.attr}' is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith('_'):
            raise LaunchError(f"eval: name '{node.id}' is not allowed")
    namespace = {'__builtins__': _SAFE_BUILTINS, 'math': math, **_MATH_NAMES}
    try:
        return eval(compile(tree, '<launch eval>', 'eval'), namespace)  # noqa: S307
    except Exception as exc:  # any error in user code is a launch-file error
        raise LaunchError(
            f'eval: {expression!r} failed: {type(exc).__name__}: {exc}') from None


def _eval(ctx: EvalContext, args: list) -> str:
    _nargs('eval', args, 1, 2)
    modules = []
    if len(args) == 2:
        modules = [m.strip() for m in evaluate(args[1], ctx).split(',') if m.strip()]
    return str(_safe_eval(evaluate(args[0], ctx), modules))


def _command(ctx: EvalContext, args: list) -> str:
    _nargs('command', args, 1, 2)
    command = evaluate(args[0], ctx)
    on_stderr = evaluate(args[1], ctx) if len(args) == 2 else 'fail'
    if on_stderr not in ('fail', 'ignore', 'warn', 'capture'):
        raise LaunchError("command: on_stderr must be one of fail, ignore, warn, capture")
    try:
        result = subprocess.run(
            shlex.split(command), stdout=subprocess.PIPE, text=True,
            stderr=subprocess.STDOUT if on_stderr == 'capture' else subprocess.PIPE,
            env=dict(ctx.environment), stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        raise LaunchError(f'command {command!r} could not be run: {exc}') from None
    if result.returncode != 0:
        raise LaunchError(f'command {command!r} failed with exit code {result.returncode}'
                          + (f': {result.stderr.strip()}' if result.stderr else ''))
    if result.stderr and on_stderr == 'fail':
        raise LaunchError(f'command {command!r} wrote to stderr: {result.stderr.strip()}')
    if result.stderr and on_stderr == 'warn':
        print(f'[WARNING] [launch]: command {command!r} wrote to stderr:\n{result.stderr}',
              file=sys.stderr)
    return result.stdout


def _not(ctx: EvalContext, args: list) -> str:
    _nargs('not', args, 1)
    return _bool_text(not to_bool(evaluate(args[0], ctx), 'not'))


def _and(ctx: EvalContext, args: list) -> str:
    _nargs('and', args, 2)
    return _bool_text(all([to_bool(evaluate(a, ctx), 'and') for a in args]))


def _or(ctx: EvalContext, args: list) -> str:
    _nargs('or', args, 2)
    return _bool_text(any([to_bool(evaluate(a, ctx), 'or') for a in args]))


def _any(ctx: EvalContext, args: list) -> str:
    return _bool_text(any([to_bool(evaluate(a, ctx), 'any') for a in args]))


def _all(ctx: EvalContext, args: list) -> str:
    return _bool_text(all([to_bool(evaluate(a, ctx), 'all') for a in args]))


def _values_equal(left: str, right: str) -> bool:
    # Upstream: booleans compare by truth value, numbers with math.isclose.
    bools = ('true', 'false', '1', '0')
    if left.lower() in bools and right.lower() in bools:
        return (left.lower() in ('true', '1')) == (right.lower() in ('true', '1'))
    try:
        return math.isclose(float(left), float(right))
    except ValueError:
        return left == right


def _equals(ctx: EvalContext, args: list) -> str:
    _nargs('equals', args, 2)
    return _bool_text(_values_equal(evaluate(args[0], ctx), evaluate(args[1], ctx)))


def _not_equals(ctx: EvalContext, args: list) -> str:
    _nargs('not-equals', args, 2)
    return _bool_text(not _values_equal(evaluate(args[0], ctx), evaluate(args[1], ctx)))


def _if(ctx: EvalContext, args: list) -> str:
    _nargs('if', args, 2, 3)
    if to_bool(evaluate(args[0], ctx), 'if'):
        return evaluate(args[1], ctx)
    return evaluate(args[2], ctx) if len(args) == 3 else ''


_HANDLERS: Dict[str, Callable[[EvalContext, list], str]] = {
    'var': _var,
    'env': _env,
    'optenv': _optenv,
    'find-pkg-share': _find_pkg_share,
    'find-pkg-prefix': _find_pkg_prefix,
    'find-exec': _find_exec,
    'exec-in-pkg': _exec_in_pkg,
    'dirname': _dirname,
    'filename': _filename,
    'anon': _anon,
    'eval': _eval,
    'command': _command,
    'not': _not,
    'and': _and,
    'or': _or,
    'any': _any,
    'all': _all,
    'equals': _equals,
    'not-equals': _not_equals,
    'if': _if,
}

# ---------------------------------------------------------------------- command lines

def split_command_line(template: Template, ctx: EvalContext) -> List[str]:
    """Split a ``cmd``/``args`` attribute into arguments.

    Like upstream, literal text is split shell-style while a substitution's
    result is never split (``$(dirname)/x.py`` stays one argument even with
    spaces in the path). Unlike upstream's per-fragment ``shlex.split``, quotes
    may span substitutions: ``'$(var a) $(var b)'`` is one argument.
    """
    args: List[str] = []
    current: List[str] = []
    in_arg = False
    quote: Optional[str] = None
    for part in template:
        if isinstance(part, Substitution):
            current.append(perform(part, ctx))
            in_arg = True
            continue
        i = 0
        while i < len(part):
            char = part[i]
            if quote == "'":
                if char == "'":
                    quote = None
                else:
                    current.append(char)
            elif quote == '"':
                if char == '"':
                    quote = None
                elif char == '\\' and i + 1 < len(part) and part[i + 1] in '"\\$`':
                    current.append(part[i + 1])
                    i += 1
                else:
                    current.append(char)
            elif char.isspace():
                if in_arg:
                    args.append(''.join(current))
                    current, in_arg = [], False
            elif char in '\'"':
                quote, in_arg = char, True
            elif char == '\\' and i + 1 < len(part):
                current.append(part[i + 1])
                in_arg = True
                i += 1
            else:
                current.append(char)
                in_arg = True
            i += 1
    if quote is not None:
        raise LaunchError(f'unterminated {quote} quote in command line')
    if in_arg:
        args.append(''.join(current))
    return args


#: Names of all supported substitutions.
SUBSTITUTIONS = tuple(sorted(_HANDLERS))


def evaluate_condition(value: str) -> bool:
    """``if``/``unless`` attribute semantics: true/false/1/0, case-insensitive, else error."""
    text = value.strip().lower()
    if text in ('true', '1'):
        return True
    if text in ('false', '0'):
        return False
    raise LaunchError(f"invalid condition {value!r}: expected one of true, false, 1, 0")
