# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Parsing and evaluation of ``$(name arg ...)`` substitutions in attribute values.

Parsing follows the ROS 2 launch frontend grammar (``launch/share/launch/frontend/grammar.lark``):

* outside a substitution any text is literal; ``\\x`` stands for ``x`` (so ``\\$(`` is a literal ``$(``);
  a ``$`` not followed by ``(`` is plain text;
* ``$(NAME)`` or ``$(NAME ARG ARG ...)``: NAME is a letter then letters, digits, ``_`` or ``-``; arguments
  are separated by exactly one space; an argument is either a run of unquoted characters and nested
  substitutions (no space, quote, ``(`` or ``)`` unless escaped with ``\\``) or one whole ``'single'`` or
  ``"double"`` quoted string, which may hold spaces, parentheses and substitutions.

Evaluation follows ``launch`` and ``launch_ros``; the substitutions are exactly upstream's set (an unknown
name is refused when the file is loaded, as upstream's parser does): var, env, anon, eval, command,
dirname, filename, find-exec, file-content, not, and, or, any, all, equals, not-equals, if, log_dir,
launch_log_dir (launch); find-pkg-share, find-pkg-prefix, exec-in-pkg, param (launch_ros). ``eval`` is
restricted (see :func:`_safe_eval`).

:func:`split_command_line` turns a ``cmd``/``args`` template into argv by upstream's rules.
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
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import packages
from .errors import LaunchError


@dataclass(frozen=True)
class Substitution:
    """One parsed ``$(name args...)``; each argument is itself a template."""

    name: str
    args: tuple


#: A template is a list of literal text and substitutions, concatenated on evaluation.
Part = str | Substitution
Template = list[Part]


@dataclass
class EvalContext:
    """What substitutions can see while evaluating one attribute (upstream's launch context)."""

    #: Launch configurations; ``$(anon)`` stores its names here too, as upstream does.
    configurations: MutableMapping[str, object]
    environment: MutableMapping[str, str]
    launch_file: Path | None = None
    #: Returns the launch's log directory (``$(log_dir)``); None outside a run.
    log_dir: Callable[[], Path] | None = None
    #: Where ``$(command ... warn)`` reports (the runner's warning list).
    warn: Callable[[str], None] = field(
        default=lambda message: print(f"[WARNING] [launch]: {message}", file=sys.stderr)
    )


# --------------------------------------------------------------------------- parsing

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
# Characters an unquoted substitution argument may not hold unless escaped (UNQUOTED_RSTRING).
_UNQUOTED_STOP = " '\"()$"


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos]

    def starts_substitution(self) -> bool:
        return self.text.startswith("$(", self.pos)

    def fail(self, message: str) -> LaunchError:
        return LaunchError(f"{message} (at column {self.pos + 1} of {self.text!r})")


def _append_text(parts: Template, text: str) -> None:
    if parts and isinstance(parts[-1], str):
        parts[-1] += text
    else:
        parts.append(text)


def parse_template(text: str) -> Template:
    """Parse an attribute value into literal text and substitutions (names and arity are checked)."""
    reader = _Reader(text)
    parts: Template = []
    while not reader.at_end():
        if reader.starts_substitution():
            parts.append(_parse_substitution(reader, quote=None))
        elif reader.peek() == "\\" and reader.pos + 1 < len(text):
            _append_text(parts, text[reader.pos + 1])
            reader.pos += 2
        else:
            _append_text(parts, reader.peek())
            reader.pos += 1
    return parts or [""]


def _parse_substitution(reader: _Reader, quote: str | None) -> Substitution:
    start = reader.pos
    reader.pos += 2  # '$('
    match = _IDENTIFIER.match(reader.text, reader.pos)
    if match is None:
        raise reader.fail("expected a substitution name after '$('")
    name = match.group(0)
    reader.pos = match.end()
    args: list[Template] = []
    while True:
        if reader.at_end():
            reader.pos = start
            raise reader.fail(f"unterminated substitution '$({name}'")
        char = reader.peek()
        if char == ")":
            reader.pos += 1
            break
        if char != " ":
            raise reader.fail(f"expected ' ' or ')' in '$({name} ...)'")
        reader.pos += 1  # exactly one space separates arguments
        args.append(_parse_argument(reader, quote))
    check_arity(name, len(args))
    return Substitution(name, tuple(args))


def _parse_argument(reader: _Reader, quote: str | None) -> Template:
    """One argument: unquoted parts, or one whole quoted template (inside a quote: unquoted only)."""
    text = reader.text
    if not reader.at_end() and reader.peek() in "'\"" and quote is None:
        return _parse_quoted(reader)
    parts: Template = []
    stop = _UNQUOTED_STOP if quote is None else _UNQUOTED_STOP.replace('"' if quote == "'" else "'", "")
    while not reader.at_end():
        char = reader.peek()
        if reader.starts_substitution():
            parts.append(_parse_substitution(reader, quote))
        elif char == "\\" and reader.pos + 1 < len(text):
            _append_text(parts, text[reader.pos + 1])
            reader.pos += 2
        elif char in stop:
            if char == "(":
                raise reader.fail("unescaped '(' in a substitution argument: quote the argument or write '\\('")
            if char == "$":  # a '$' not starting a substitution is text
                _append_text(parts, char)
                reader.pos += 1
                continue
            break
        else:
            _append_text(parts, char)
            reader.pos += 1
    if not parts:
        raise reader.fail("empty substitution argument (use quotes for an empty string)")
    return parts


def _parse_quoted(reader: _Reader) -> Template:
    quote = reader.peek()
    start = reader.pos
    reader.pos += 1
    parts: Template = [""]  # '' is a real (empty) argument
    while True:
        if reader.at_end():
            reader.pos = start
            raise reader.fail(f"unterminated {quote} quote")
        char = reader.peek()
        if char == quote:
            reader.pos += 1
            return parts
        if reader.starts_substitution():
            parts.append(_parse_substitution(reader, quote))
        elif char == "\\" and reader.pos + 1 < len(reader.text):
            _append_text(parts, reader.text[reader.pos + 1])
            reader.pos += 2
        else:
            _append_text(parts, char)
            reader.pos += 1


def has_substitutions(template: Template) -> bool:
    return any(isinstance(part, Substitution) for part in template)


def unescape(text: str) -> str:
    """Plain-text attributes (``<arg name>``, ``description``, ``<choice value>``): ``\\x`` -> ``x``."""
    return re.sub(r"\\(.)", r"\1", text)


# ------------------------------------------------------------------------ evaluation


def evaluate(template: Template, ctx: EvalContext) -> str:
    """Evaluate a parsed template to a string."""
    return "".join(part if isinstance(part, str) else perform(part, ctx) for part in template)


def substitute(text: str, ctx: EvalContext) -> str:
    """Parse and evaluate *text* in one go."""
    return evaluate(parse_template(text), ctx)


def perform(sub: Substitution, ctx: EvalContext) -> str:
    return _HANDLERS[sub.name][0](ctx, list(sub.args))


def check_arity(name: str, count: int) -> None:
    """Refuse an unknown substitution or a wrong argument count (upstream fails when parsing)."""
    if name not in _HANDLERS:
        raise LaunchError(f"unknown substitution '$({name})' (known: {', '.join(sorted(_HANDLERS))})")
    _fn, low, high = _HANDLERS[name]
    if count < low or (high is not None and count > high):
        expected = str(low) if low == high else (f"{low} to {high}" if high is not None else f"{low} or more")
        raise LaunchError(f"substitution '$({name})' expects {expected} argument(s), got {count}")


def parse_bool(text: str) -> bool | None:
    """Launch's booleans: YAML's (true, False, yes, on, ...) plus '1'/'0'; None for any other text."""
    if text in ("1", "0"):
        return text == "1"
    try:
        loaded = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        loaded = None
    return loaded if isinstance(loaded, bool) else None


def to_bool(value: str, what: str) -> bool:
    """Boolean coercion of launch's typed substitutions (``parse_bool`` of the stripped text)."""
    loaded = parse_bool(value.strip())
    if loaded is not None:
        return loaded
    raise LaunchError(f"{what}: expected a boolean (true/false/1/0), got {value!r}")


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _lookup(kind: str, table, ctx: EvalContext, args: list, missing: str) -> str:
    """Shared body of var/env: the value by name, else the default, else an error."""
    name = evaluate(args[0], ctx)
    if name in table:
        return str(table[name])
    if len(args) == 2:
        return evaluate(args[1], ctx)
    raise LaunchError(missing.format(name=name))


def _var(ctx: EvalContext, args: list) -> str:
    return _lookup("var", ctx.configurations, ctx, args, "launch configuration '{name}' does not exist")


def _env(ctx: EvalContext, args: list) -> str:
    return _lookup("env", ctx.environment, ctx, args, "environment variable '{name}' does not exist")


def _find_pkg_share(ctx: EvalContext, args: list) -> str:
    return str(packages.find_package_share(evaluate(args[0], ctx)))


def _find_pkg_prefix(ctx: EvalContext, args: list) -> str:
    return str(packages.find_package_prefix(evaluate(args[0], ctx)))


def _find_exec(ctx: EvalContext, args: list) -> str:
    name = evaluate(args[0], ctx)
    found = shutil.which(name, path=ctx.environment.get("PATH"))
    if found is None:
        raise LaunchError(f"executable '{name}' not found on the PATH")
    return found


def _exec_in_pkg(ctx: EvalContext, args: list) -> str:
    executable, package = evaluate(args[0], ctx), evaluate(args[1], ctx)
    return packages.find_node_executable(package, executable)


def _launch_file(ctx: EvalContext, name: str) -> Path:
    if ctx.launch_file is None:
        raise LaunchError(f"'$({name})' used outside of a launch file")
    return ctx.launch_file


def _dirname(ctx: EvalContext, args: list) -> str:
    return str(_launch_file(ctx, "dirname").parent)


def _filename(ctx: EvalContext, args: list) -> str:
    return str(_launch_file(ctx, "filename"))


def _anon(ctx: EvalContext, args: list) -> str:
    # Upstream keeps the name as the launch configuration 'anon<name>': stable within its scope (a
    # scoped <group> forgets it, an include shares it) and visible to $(var anon<name>).
    name = evaluate(args[0], ctx)
    key = "anon" + name
    if key not in ctx.configurations:
        raw = f"{name}_{socket.gethostname()}_{os.getpid()}_{random.randint(0, sys.maxsize)}"
        ctx.configurations[key] = re.sub(r"[.:-]", "_", raw)
    return str(ctx.configurations[key])


def _file_content(ctx: EvalContext, args: list) -> str:
    path = evaluate(args[0], ctx)
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise LaunchError(f"File not found: {path}") from None
    except OSError as exc:
        raise LaunchError(f"cannot read {path}: {exc.strerror}") from None


def _param(ctx: EvalContext, args: list) -> str:
    # launch_ros: the first <set_parameter> of that name in scope, as Python's str() of its typed value.
    name = evaluate(args[0], ctx)
    for item in ctx.configurations.get("global_params", []) or []:
        if isinstance(item, tuple) and item[0] == name:
            return str(item[1])
    if len(args) == 2:
        return evaluate(args[1], ctx)
    raise LaunchError(f"parameter '{name}' not found")


def _log_dir(ctx: EvalContext, args: list) -> str:
    if ctx.log_dir is None:
        raise LaunchError("$(log_dir) is only known when the launch runs")
    return str(ctx.log_dir())


# Builtins that cannot reach the file system, the network or interpreter internals.
_SAFE_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "abs",
        "all",
        "any",
        "bool",
        "dict",
        "divmod",
        "enumerate",
        "float",
        "int",
        "len",
        "list",
        "max",
        "min",
        "pow",
        "range",
        "reversed",
        "round",
        "sorted",
        "str",
        "sum",
        "tuple",
        "zip",
    )
}
_MATH_NAMES = {name: value for name, value in vars(math).items() if not name.startswith("_")}


def _safe_eval(expression: str, modules: list[str]) -> object:
    """Evaluate a Python expression with math only.

    Upstream evaluates with the full builtins plus the ``math`` names; here the
    names are math's plus a few pure builtins, other modules are refused, and
    names/attributes starting with ``_`` are rejected so ``().__class__``-style
    escapes are impossible. Launch files are code, but pip mode should not turn
    a typo in a launch argument into arbitrary code execution.
    """
    for module in modules:
        if module != "math":
            raise LaunchError(f"eval: module '{module}' is not available (only 'math')")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise LaunchError(f"eval: invalid expression {expression!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise LaunchError(f"eval: access to '{node.attr}' is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise LaunchError(f"eval: name '{node.id}' is not allowed")
    namespace = {"__builtins__": _SAFE_BUILTINS, "math": math, **_MATH_NAMES}
    try:
        return eval(compile(tree, "<launch eval>", "eval"), namespace)  # noqa: S307
    except Exception as exc:  # any error in user code is a launch-file error
        raise LaunchError(f"eval: {expression!r} failed: {type(exc).__name__}: {exc}") from None


def _eval(ctx: EvalContext, args: list) -> str:
    modules = []
    if len(args) == 2:
        modules = [m.strip() for m in evaluate(args[1], ctx).split(",") if m.strip()]
    return str(_safe_eval(evaluate(args[0], ctx), modules))


def _command(ctx: EvalContext, args: list) -> str:
    command = evaluate(args[0], ctx)
    on_stderr = evaluate(args[1], ctx) if len(args) == 2 else "fail"
    if on_stderr not in ("fail", "ignore", "warn", "capture"):
        raise LaunchError("command: on_stderr must be one of fail, ignore, warn, capture")
    try:
        result = subprocess.run(
            shlex.split(command),
            stdout=subprocess.PIPE,
            text=True,
            stderr=subprocess.STDOUT if on_stderr == "capture" else subprocess.PIPE,
            env=dict(ctx.environment),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except OSError as exc:
        raise LaunchError(f"command {command!r} could not be run: {exc}") from None
    if result.returncode != 0:
        raise LaunchError(
            f"command {command!r} failed with exit code {result.returncode}"
            + (f": {result.stderr.strip()}" if result.stderr else "")
        )
    if result.stderr and on_stderr == "fail":
        raise LaunchError(f"command {command!r} wrote to stderr: {result.stderr.strip()}")
    if result.stderr and on_stderr == "warn":
        ctx.warn(f"command {command!r} wrote to stderr:\n{result.stderr}")
    return result.stdout


def _not(ctx: EvalContext, args: list) -> str:
    return _bool_text(not to_bool(evaluate(args[0], ctx), "not"))


def _and(ctx: EvalContext, args: list) -> str:
    return _bool_text(all([to_bool(evaluate(a, ctx), "and") for a in args]))


def _or(ctx: EvalContext, args: list) -> str:
    return _bool_text(any([to_bool(evaluate(a, ctx), "or") for a in args]))


def _any(ctx: EvalContext, args: list) -> str:
    return _bool_text(any([to_bool(evaluate(a, ctx), "any") for a in args]))


def _all(ctx: EvalContext, args: list) -> str:
    return _bool_text(all([to_bool(evaluate(a, ctx), "all") for a in args]))


def _values_equal(left: str, right: str) -> bool:
    # Upstream: booleans compare by truth value, numbers with math.isclose.
    bools = ("true", "false", "1", "0")
    if left.lower() in bools and right.lower() in bools:
        return (left.lower() in ("true", "1")) == (right.lower() in ("true", "1"))
    try:
        return math.isclose(float(left), float(right))
    except ValueError:
        return left == right


def _equals(ctx: EvalContext, args: list) -> str:
    return _bool_text(_values_equal(evaluate(args[0], ctx), evaluate(args[1], ctx)))


def _not_equals(ctx: EvalContext, args: list) -> str:
    return _bool_text(not _values_equal(evaluate(args[0], ctx), evaluate(args[1], ctx)))


def _if(ctx: EvalContext, args: list) -> str:
    if to_bool(evaluate(args[0], ctx), "if"):
        return evaluate(args[1], ctx)
    return evaluate(args[2], ctx) if len(args) == 3 else ""


# name -> (handler, min args, max args or None for no limit), as upstream's parse methods check them.
_HANDLERS: dict[str, tuple[Callable[[EvalContext, list], str], int, int | None]] = {
    "var": (_var, 1, 2),
    "env": (_env, 1, 2),
    "anon": (_anon, 1, 1),
    "eval": (_eval, 1, 2),
    "command": (_command, 1, 2),
    "dirname": (_dirname, 0, 0),
    "filename": (_filename, 0, 0),
    "find-exec": (_find_exec, 1, 1),
    "file-content": (_file_content, 1, 1),
    "not": (_not, 1, 1),
    "and": (_and, 2, 2),
    "or": (_or, 2, 2),
    "any": (_any, 1, None),
    "all": (_all, 1, None),
    "equals": (_equals, 2, 2),
    "not-equals": (_not_equals, 2, 2),
    "if": (_if, 2, 3),
    "log_dir": (_log_dir, 0, 0),
    "launch_log_dir": (_log_dir, 0, 0),
    "find-pkg-share": (_find_pkg_share, 1, 1),
    "find-pkg-prefix": (_find_pkg_prefix, 1, 1),
    "exec-in-pkg": (_exec_in_pkg, 2, 2),
    "param": (_param, 1, 2),
}

#: Names of all supported substitutions.
SUBSTITUTIONS = tuple(sorted(_HANDLERS))

# ---------------------------------------------------------------------- command lines


def split_command_line(template: Template, ctx: EvalContext) -> list[str]:
    """Split a ``cmd``/``args``/``ros_args`` attribute into arguments, by upstream's rules.

    Each literal text fragment is split shell-style on its own (so a quote cannot span a
    substitution); a substitution's value is never split and joins the literal text it touches:
    ``$(find-pkg-share p)/cfg.yaml`` is one argument, ``exec $(var a)`` two. A fragment that is only
    white space ends the current argument (even an empty one, as upstream does).
    """
    args: list[list[str]] = []
    current: list[str] = []
    for part in template:
        if isinstance(part, Substitution):
            current.append(perform(part, ctx))
            continue
        if not part:
            continue
        try:
            tokens = shlex.split(part)
        except ValueError as exc:
            raise LaunchError(f"{exc} in {part!r} (quotes cannot span a substitution)") from None
        if not tokens:
            args.append(current)
            current = []
            continue
        if part[0].isspace() and current:
            args.append(current)
            current = []
        current.append(tokens[0])
        if len(tokens) > 1:
            args.append(current)
            args.extend([token] for token in tokens[1:-1])
            current = [tokens[-1]]
        if part[-1].isspace():
            args.append(current)
            current = []
    if current:
        args.append(current)
    return ["".join(arg) for arg in args]


def evaluate_condition(value: str) -> bool:
    """``if``/``unless`` attribute semantics: true/false/1/0, case-insensitive, else error."""
    text = value.strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise LaunchError(f"invalid condition {value!r}: expected one of true, false, 1, 0")
