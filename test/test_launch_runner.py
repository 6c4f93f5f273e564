# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Tests of vla_ros.launch_runner: XML resolution, substitutions, CLI and supervisor.

Supervisor tests start real child processes (test/launch_fixtures/child.py run
with sys.executable); they wait by polling files/processes with deadlines.
Upstream conformance (each case naming the launch / launch_ros rule it checks)
is in test_launch_conformance.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ros_helpers import REPO, spin_until

from vla_ros.launch_runner import (
    LaunchError,
    describe_arguments,
    main,
    parse_launch_file,
    run_launch_file,
)
from vla_ros.launch_runner.packages import SOURCE_ROOT
from vla_ros.launch_runner.substitutions import EvalContext, substitute

FIXTURES = Path(__file__).parent / "launch_fixtures"
PY = sys.executable


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def launch_log_dir(tmp_path, monkeypatch):
    """Runs write their launch log under here, not ~/.ros/log."""
    monkeypatch.setenv("ROS_LOG_DIR", str(tmp_path / "ros_log"))
    return tmp_path / "ros_log"


@pytest.fixture
def ament_prefix(tmp_path, monkeypatch):
    """A fake install prefix holding package 'fake_pkg' with one node executable."""
    prefix = tmp_path / "install"
    index = prefix / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / "fake_pkg").write_text("")
    (prefix / "share" / "fake_pkg" / "launch").mkdir(parents=True)
    exe = prefix / "lib" / "fake_pkg" / "fake_node"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho fake\n")
    exe.chmod(0o755)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    return prefix


def write_launch(tmp_path: Path, body: str, name: str = "test.launch.xml") -> Path:
    path = tmp_path / name
    path.write_text(f"<launch>\n{body}\n</launch>\n")
    return path


def ctx(configs=None, env=None, launch_file=None) -> EvalContext:
    return EvalContext(dict(configs or {}), dict(env or {}), launch_file)


def pid_alive(pid: int) -> bool:
    """True while *pid* runs; a zombie (killed, not yet reaped by init) counts as gone."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    except OSError:
        return True  # no /proc: os.kill succeeded, so assume it runs
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --------------------------------------------------------------------- substitutions


def test_substitution_var_env():
    c = ctx({"a": "x", "which": "a"}, {"HOME_X": "/h"})
    assert substitute("pre-$(var a)-post", c) == "pre-x-post"
    assert substitute("$(var $(var which))", c) == "x"  # nested
    assert substitute("$(var missing fallback)", c) == "fallback"
    assert substitute("$(env HOME_X)", c) == "/h"
    assert substitute("$(env NOPE default)", c) == "default"
    with pytest.raises(LaunchError, match="unknown substitution '\\$\\(optenv\\)'"):
        substitute("$(optenv NOPE)", c)  # ROS 1 only: upstream has no optenv
    assert substitute(r"\$(var a) $5 costs", c) == "$(var a) $5 costs"  # escaped, lone $
    with pytest.raises(LaunchError, match="launch configuration 'missing'"):
        substitute("$(var missing)", c)
    with pytest.raises(LaunchError, match="environment variable 'NOPE'"):
        substitute("$(env NOPE)", c)


def test_substitution_files_and_packages(tmp_path, monkeypatch):
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)  # as in pip mode
    launch_file = tmp_path / "x.launch.xml"
    c = ctx(launch_file=launch_file)
    assert substitute("$(dirname)/a", c) == f"{tmp_path}/a"
    assert substitute("$(filename)", c) == str(launch_file)
    # vla_ros is not in the ament index here: pip mode falls back to the source tree.
    assert substitute("$(find-pkg-share vla_ros)", c) == str(SOURCE_ROOT) == str(REPO)
    assert substitute("$(find-pkg-prefix vla_ros)", c) == str(REPO)
    with pytest.raises(LaunchError, match="package 'no_such_pkg' not found"):
        substitute("$(find-pkg-share no_such_pkg)", c)
    with pytest.raises(LaunchError, match="outside of a launch file"):
        substitute("$(dirname)", ctx())


def test_substitution_packages_from_ament_index(ament_prefix):
    c = ctx(env={"PATH": os.environ["PATH"]})
    assert substitute("$(find-pkg-share fake_pkg)", c) == str(ament_prefix / "share" / "fake_pkg")
    assert substitute("$(find-pkg-prefix fake_pkg)", c) == str(ament_prefix)
    assert substitute("$(exec-in-pkg fake_node fake_pkg)", c) == str(ament_prefix / "lib" / "fake_pkg" / "fake_node")
    assert substitute("$(find-exec sh)", c).endswith("/sh")


def test_substitution_logic_and_eval():
    c = ctx({"t": "true", "f": "False", "n": "2"})
    assert substitute("$(not $(var t))", c) == "false"
    assert substitute("$(and $(var t) 1)", c) == "true"
    assert substitute("$(and $(var t) $(var f))", c) == "false"
    assert substitute("$(or $(var f) yes)", c) == "true"  # YAML boolean rules
    assert substitute("$(any 0 false 1)", c) == "true"
    assert substitute("$(all 1 true 0)", c) == "false"
    assert substitute("$(equals $(var n) 2.0)", c) == "true"  # numbers compare as floats
    assert substitute("$(equals true 1)", c) == "true"  # booleans by truth value
    assert substitute("$(equals abc abd)", c) == "false"
    assert substitute("$(not-equals a b)", c) == "true"
    assert substitute("$(if $(var t) yes no)", c) == "yes"
    assert substitute("$(if $(var f) yes)", c) == ""
    assert substitute("$(eval '$(var n) * 3 + 1')", c) == "7"
    assert substitute("$(eval 'floor(pi) + math.sqrt(16)')", c) == "7.0"
    assert substitute("$(eval \"'$(var t)' == 'true'\")", c) == "True"
    with pytest.raises(LaunchError, match="expected a boolean"):
        substitute("$(not maybe)", c)


def test_substitution_eval_is_restricted():
    for expression in ("__import__('os')", "open('/etc/passwd')", "().__class__", "exec('1')"):
        with pytest.raises(LaunchError, match="eval"):
            substitute(f'$(eval "{expression}")', ctx())
    with pytest.raises(LaunchError, match="module 'os'"):
        substitute("$(eval 'os.getcwd()' os)", ctx())


def test_substitution_anon_and_command():
    c = ctx(env=dict(os.environ))
    first = substitute("$(anon talker)", c)
    assert first.startswith("talker_") and "-" not in first and "." not in first
    assert substitute("$(anon talker)", c) == first  # stable within one scope
    assert substitute("$(anon other)", c) != first
    assert substitute("$(command 'echo hi there')", c) == "hi there\n"
    with pytest.raises(LaunchError, match="exit code"):
        substitute("$(command 'false')", c)


@pytest.mark.parametrize(
    "text, message",
    [
        ("$(nope x)", "unknown substitution '\\$\\(nope\\)'"),
        ("$(var a", "unterminated substitution"),
        ("$(var a b c)", "'\\$\\(var\\)' expects 1 to 2 argument"),
        ("$(dirname x)", "expects 0 argument"),
        ("$(eval 'unterminated)", "unterminated"),
        ("$(eval max(1,2))", "unescaped '\\('"),
        ("$()", "expected a substitution name"),
    ],
)
def test_substitution_errors(text, message):
    with pytest.raises(LaunchError, match=message):
        substitute(text, ctx({"a": "1"}, launch_file=Path("/x.xml")))


# ------------------------------------------------------------------ arguments / plan


def test_basic_file_defaults(monkeypatch):
    monkeypatch.setenv("VLA_TEST_UNSET", "present")
    plan = parse_launch_file(FIXTURES / "basic.launch.xml", {"python": PY})
    assert [p.label for p in plan.processes] == ["printer-1", "echo-2"]
    printer, echo = plan.processes
    assert printer.cmd == [PY, str(FIXTURES / "child.py"), "env", "VLA_TEST_SET"]
    assert printer.cwd == str(FIXTURES)
    assert printer.env["VLA_TEST_SET"] == "sim"
    assert printer.env["VLA_CHILD_ONLY"] == "hello sim"
    assert "VLA_TEST_UNSET" not in printer.env
    # Literal text is split shell-style; a substitution's value is never split.
    assert echo.cmd == ["echo", "two words", "hello sim"]
    assert "VLA_CHILD_ONLY" not in echo.env
    assert {a.name: a.value for a in plan.arguments} == {"python": PY, "mode": "sim", "greeting": "hello sim"}
    assert plan.configurations["script"] == str(FIXTURES / "child.py")


def test_basic_file_overrides_and_choices():
    plan = parse_launch_file(FIXTURES / "basic.launch.xml", {"python": PY, "mode": "real"})
    assert [p.cmd for p in plan.processes][1:] == [["echo", "real-only"]]
    assert plan.processes[0].env["VLA_CHILD_ONLY"] == "hello real"
    with pytest.raises(LaunchError) as info:
        parse_launch_file(FIXTURES / "basic.launch.xml", {"python": PY, "mode": "moon"})
    assert "basic.launch.xml:3: <arg> attribute 'name'" in str(info.value)
    assert "'moon'" in str(info.value) and "['sim', 'real']" in str(info.value)


def test_missing_required_argument():
    with pytest.raises(LaunchError) as info:
        parse_launch_file(FIXTURES / "basic.launch.xml", {})
    message = str(info.value)
    assert message.startswith(f"{FIXTURES / 'basic.launch.xml'}:2: <arg> attribute 'name'")
    assert "required launch argument 'python' was not provided" in message


def test_include_is_not_a_scope_but_a_group_is(ament_prefix):
    plan = parse_launch_file(FIXTURES / "include_parent.launch.xml", {"with_node": "true"})
    labels = [p.label for p in plan.processes]
    assert labels == ["arm_driver-1", "fake_node-2", "after-3", "second-4", "fake_node-5", "last-6"]
    child_file = str(FIXTURES / "include_child.launch.xml")
    assert plan.processes[0].cmd == ["echo", "50", "from-parent", child_file]
    # Everything the include set is still set after it (upstream: no push/pop around an include).
    assert plan.processes[2].cmd == ["echo", "50", "set-in-child"]
    assert plan.processes[1].node.namespace == "/child_ns"
    # So the second include sees rate=50 and the namespace the first one pushed, inside 'outer'.
    assert plan.processes[3].cmd == ["echo", "50", "from-parent", child_file]
    assert plan.processes[4].node.namespace == "/child_ns/outer/child_ns"
    assert plan.processes[4].node.name == "second"
    # The group scoped the second include: its child_name and namespace ended with it.
    assert plan.processes[5].cmd == ["echo", "arm_driver", "/child_ns"]


def test_include_errors(tmp_path):
    missing = write_launch(tmp_path, '<include file="$(dirname)/nope.launch.xml"/>')
    with pytest.raises(
        LaunchError,
        match=r"test.launch.xml:2: <include> attribute 'file': "
        r"launch file '.*nope.launch.xml' does not exist",
    ):
        parse_launch_file(missing)
    child = write_launch(tmp_path, '<arg name="needed"/>', "child.launch.xml")
    parent = write_launch(tmp_path, f'<include file="{child}"/>', "parent.launch.xml")
    with pytest.raises(LaunchError) as info:
        parse_launch_file(parent)
    assert "child.launch.xml:2: <arg> attribute 'name'" in str(info.value)
    assert "included from" in str(info.value) and "parent.launch.xml:2" in str(info.value)


def test_nodes_namespaces_params_and_remaps(ament_prefix):
    plan = parse_launch_file(FIXTURES / "nodes.launch.xml", {})
    try:
        exe = str(ament_prefix / "lib" / "fake_pkg" / "fake_node")
        by_name = {p.node.name: p for p in plan.processes}
        top = by_name["top"]
        rule, *files = top.node.params_files
        assert rule.rule and rule.path == "use_sim_time:=True"  # <set_parameter>: a -p rule
        # launch_ros writes one file per inline <param> (nested ones make one file), in document order.
        paths = [f.path for f in files]
        assert paths[8] == str(FIXTURES / "params.yaml")
        assert top.cmd == [
            exe,
            "--flag",
            "arm",
            "--ros-args",
            "--log-level",
            "debug",
            "--ros-args",
            "-r",
            "__node:=top",
            "-p",
            "use_sim_time:=True",
            *[a for p in paths for a in ("--params-file", p)],
            "-r",
            "/tf:=tf",
            "-r",
            "cmd:=/arm/cmd",
        ]
        expected = {
            "rate": 10,
            "gain": 0.5,
            "enabled": False,
            "label": "hello world",
            "ids": [1, 2, 3],
            "names": ["a", "b", "arm"],
            "forced": "42",
            "limits.max": 2.0,
            "limits.inner.deep": "x",
            "after": "arm",
        }
        written = {}
        for path in paths[:8] + paths[9:]:
            document = yaml.safe_load(Path(path).read_text())
            assert list(document) == ["/**"]  # name without namespace: not fully specified
            written.update(document["/**"]["ros__parameters"])
        assert written == expected and list(written) == list(expected)
        assert top.node.parameters == {"use_sim_time": True, **expected}
        assert top.node.namespace is None and "__ns" not in " ".join(top.cmd)

        assert by_name["relative"].node.namespace == "/arm/sub"
        assert by_name["absolute"].node.namespace == "/abs"
        assert by_name["deep"].node.namespace == "/arm/inner"
        assert by_name["after_group"].node.namespace is None  # group popped the namespace
        relative = by_name["relative"].cmd
        assert relative[relative.index("--ros-args") :] == [
            "--ros-args",
            "-r",
            "__node:=relative",
            "-r",
            "__ns:=/arm/sub",
            "-p",
            "use_sim_time:=True",
            "-r",
            "/tf:=tf",
            "-r",
            "a:=b",
        ]
        assert by_name["relative"].node.parameters == {"use_sim_time": True}
        # launch_ros extends the remap list in place and the group copied the configurations
        # shallowly: the group's <set_remap> leaks out, as under ros2 launch, with a warning.
        assert by_name["after_group"].node.remappings == [("/tf", "tf"), ("a", "b")]
        assert any(":25: <set_remap> also applies after the enclosing <group> ends" in w for w in plan.warnings)
        # <group scoped="false"> lets its <let> leak; exec_name sets the label.
        assert by_name["after_group"].label == "last_yes-5"
    finally:
        plan.cleanup()
    assert not Path(paths[0]).exists()


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1", 1),
        ("-2.5", -2.5),
        ("true", True),
        ("TRUE", True),
        ("text", "text"),
        ("[1.0, 2.0]", [1.0, 2.0]),
        ("['a', 'b']", ["a", "b"]),
        ("", ""),
        ("'7'", "7"),
    ],
)
def test_param_typing(tmp_path, ament_prefix, value, expected):
    path = write_launch(tmp_path, f'<node pkg="fake_pkg" exec="fake_node"><param name="p" value="{value}"/></node>')
    plan = parse_launch_file(path)
    assert plan.processes[0].node.parameters == {"p": expected}
    plan.cleanup()


@pytest.mark.parametrize(
    "attrs, expected",
    [
        ('value="1" type="float"', 1.0),
        ('value="1" type="bool"', True),
        ('value="3" type="str"', "3"),
        ('value="1,2" value-sep="," type="list_of_float"', [1.0, 2.0]),
        ('value="[1, 2]" type="list_of_str"', ["1", "2"]),
    ],
)
def test_param_explicit_types(tmp_path, ament_prefix, attrs, expected):
    path = write_launch(tmp_path, f'<node pkg="fake_pkg" exec="fake_node"><param name="p" {attrs}/></node>')
    plan = parse_launch_file(path)
    assert plan.processes[0].node.parameters == {"p": expected}
    plan.cleanup()


@pytest.mark.parametrize(
    "param, message",
    [
        ('<param name="p" value="[1, a]"/>', "same type"),
        ('<param name="p" value="{a: 1}"/>', "mapping"),
        ('<param name="p" value="x" type="int"/>', "not of type int"),
        ('<param name="p"/>', "either a value attribute or nested params"),
        ('<param name="p" value="1" bogus="2"/>', "unknown attribute"),
        ('<param from="missing.yaml" allow_substs="true"/>', "No such file"),
    ],
)
def test_param_errors(tmp_path, ament_prefix, param, message):
    path = write_launch(tmp_path, f'<node pkg="fake_pkg" exec="fake_node">{param}</node>')
    with pytest.raises(LaunchError, match=message):
        parse_launch_file(path)


def test_params_file_with_substitutions(tmp_path, ament_prefix):
    (tmp_path / "p.yaml").write_text("/**:\n  ros__parameters:\n    robot: $(var robot)\n")
    path = write_launch(
        tmp_path,
        '<arg name="robot" default="arm"/>'
        '<node pkg="fake_pkg" exec="fake_node">'
        '<param from="$(dirname)/p.yaml" allow_substs="true"/></node>',
    )
    plan = parse_launch_file(path, {"robot": "ur5"})
    generated = plan.processes[0].node.params_files[0]
    assert generated.generated
    assert yaml.safe_load(Path(generated.path).read_text()) == {"/**": {"ros__parameters": {"robot": "ur5"}}}
    plan.cleanup()


def test_node_executable_lookup(tmp_path, monkeypatch):
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("vla_test_node", "sh"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    path = write_launch(tmp_path, '<node pkg="vla_ros" exec="vla_test_node" name="n"/><node exec="sh"/>')
    plan = parse_launch_file(path)
    assert plan.processes[0].cmd[0] == str(bin_dir / "vla_test_node")  # pip mode: next to sys.executable
    assert plan.processes[1].cmd[0] == "sh"  # no pkg: run as given (the OS searches PATH)
    bad = write_launch(tmp_path, '<node pkg="vla_ros" exec="no_such_exe" name="ghost"/>')
    with pytest.raises(
        LaunchError,
        match=r"<node> attribute 'exec': node 'ghost': "
        r"executable 'no_such_exe' of package 'vla_ros'",
    ):
        parse_launch_file(bad)
    # Another package is never looked up on $PATH (a foreign same-named binary would start).
    foreign = write_launch(tmp_path, '<node pkg="other_pkg" exec="sh"/>')
    with pytest.raises(
        LaunchError, match="executable 'sh' of package 'other_pkg' not found: the package is not in the ament index"
    ):
        parse_launch_file(foreign)


@pytest.mark.parametrize(
    "condition, included",
    [
        ('if="true"', True),
        ('if="1"', True),
        ('if="FALSE"', False),
        ('unless="0"', True),
        ('unless="True"', False),
        ('if="$(not true)"', False),
    ],
)
def test_conditions(tmp_path, condition, included):
    path = write_launch(tmp_path, f'<executable cmd="echo x" {condition}/>')
    assert len(parse_launch_file(path).processes) == (1 if included else 0)


@pytest.mark.parametrize(
    "body, message",
    [
        ('<executable cmd="echo" if="yes"/>', r":3: <executable> attribute 'if': invalid condition"),
        ('<executable cmd="echo" if="1" unless="1"/>', "can't be used simultaneously"),
        ("<bogus/>", r":3: unknown tag <bogus>"),
        ('<node exec="sh"><bogus/></node>', r"unknown tag <bogus> inside <node>"),
        ('<executable cmd="echo" on_exit="restart"/>', "attribute 'on_exit': expected shutdown"),
        ('<executable cmd="echo $(foo)"/>', r"<executable> attribute 'cmd': unknown substitution"),
        (
            '<group forwarding="false"><let name="x" value="$(var outer)"/></group>',
            "launch configuration 'outer' does not exist",
        ),
        ('<push-ros-namespace namespace="1bad"/>', "namespace"),
        ('<node exec="sh" name="bad-name"/>', "invalid node name"),
    ],
)
def test_parse_errors(tmp_path, body, message):
    path = write_launch(tmp_path, '<let name="outer" value="1"/>' if "outer" in body else "")
    path.write_text(path.read_text().replace("</launch>", body + "\n</launch>"))
    with pytest.raises(LaunchError, match=message) as info:
        parse_launch_file(path)
    assert str(path) in str(info.value)


def test_unknown_attribute_is_an_error_naming_file_line_tag_and_attribute(tmp_path):
    path = write_launch(tmp_path, '<executable cmd="echo" emulate_tty="true" colour="red"/>')
    with pytest.raises(LaunchError) as info:
        parse_launch_file(path)
    assert str(info.value).startswith(f"{path}:2: <executable> attribute 'colour': unknown attribute(s) colour")


# ----------------------------------------------------------------------------- CLI


def test_cli_print(capsys):
    assert main([str(FIXTURES / "basic.launch.xml"), f"python:={PY}", "mode:=sim", "--print"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# [printer-1] {FIXTURES / 'basic.launch.xml'}:11"
    assert out[1].startswith(f"cd {FIXTURES} && env ")
    assert " VLA_TEST_SET=sim 'VLA_CHILD_ONLY=hello sim' " in out[1]
    assert out[1].endswith(f"{PY} {FIXTURES / 'child.py'} env VLA_TEST_SET")
    assert out[3] == "env VLA_TEST_SET=sim echo 'two words' 'hello sim'"


def test_cli_show_args(capsys):
    assert main([str(FIXTURES / "basic.launch.xml"), "-s"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Arguments (pass arguments as '<name>:=<value>'):\n")
    assert "\n    'python':\n        Python interpreter for the helper processes\n" in out
    assert "\n    'mode':\n        Where to run. Valid choices are: ['sim', 'real']\n        (default: 'sim')" in out
    assert "(default: 'hello $(var mode)')" in out


def test_cli_show_args_through_includes(ament_prefix):
    names = [a.name for a in describe_arguments(FIXTURES / "include_parent.launch.xml")]
    assert names == ["robot", "child_name", "rate"]


def test_cli_package_lookup_and_errors(ament_prefix, capsys):
    launch = ament_prefix / "share" / "fake_pkg" / "launch" / "demo.launch.xml"
    launch.write_text('<launch><node pkg="fake_pkg" exec="fake_node" name="demo"/></launch>')
    assert main(["fake_pkg", "demo.launch.xml", "--print"]) == 0
    assert "__node:=demo" in capsys.readouterr().out
    assert main(["fake_pkg", "absent.launch.xml"]) == 1
    assert "'absent.launch.xml' was not found" in capsys.readouterr().err
    assert main([str(FIXTURES / "basic.launch.xml")]) == 1
    assert "required launch argument 'python'" in capsys.readouterr().err


# ----------------------------------------------------------------------- supervisor


def test_required_process_exit_code_stops_siblings(tmp_path, capsys):
    ready = tmp_path / "ready"
    code = run_launch_file(FIXTURES / "supervise_required.launch.xml", {"python": PY, "ready": str(ready)})
    assert code == 3  # returned at all: the sleeper (which never ends by itself) was stopped
    sleeper_pid = int(ready.read_text())
    assert not pid_alive(sleeper_pid)
    captured = capsys.readouterr()
    assert "[sleeper-1] ready got SIGINT" in captured.out  # graceful SIGINT first
    assert "[failer-2] exiting with 3" in captured.out
    assert "required process [failer-2] died with exit code 3" in captured.out


def test_required_process_exit_zero_and_escalation(tmp_path, capsys):
    ready = tmp_path / "ready"
    code = run_launch_file(
        FIXTURES / "supervise_escalate.launch.xml", {"python": PY, "ready": str(ready), "sigterm_timeout": "0.3"}
    )
    assert code == 0
    assert not pid_alive(int(ready.read_text()))
    captured = capsys.readouterr()
    assert "[stubborn-1] ignoring SIGINT" in captured.out
    assert "[stubborn-1] got SIGTERM" in captured.out
    assert "still running after SIGINT, sending SIGTERM" in captured.out


def test_sigint_to_runner_stops_children(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    runner = subprocess.Popen(
        [
            PY,
            "-m",
            "vla_ros.launch_runner",
            str(FIXTURES / "supervise_sigint.launch.xml"),
            f"python:={PY}",
            f"dir:={tmp_path}",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ready = [tmp_path / "first", tmp_path / "second"]
    try:
        started = spin_until(lambda: all(p.exists() for p in ready), 60)
        if started:
            pids = [int(p.read_text()) for p in ready]
            assert all(pid_alive(pid) for pid in pids)
            runner.send_signal(signal.SIGINT)
        else:
            runner.kill()
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert started, f"children did not start:\n{out}\n{err}"
    assert runner.returncode == 0, err
    assert "[first-1] first got SIGINT" in out and "[second-2] second got SIGINT" in out
    assert spin_until(lambda: not any(pid_alive(pid) for pid in pids), 30)


def test_respawn_limited(tmp_path):
    counter = tmp_path / "count"
    code = run_launch_file(FIXTURES / "supervise_respawn.launch.xml", {"python": PY, "counter": str(counter)})
    assert code == 0
    assert counter.read_text().splitlines() == ["run"] * 3


def test_respawn_until_shutdown(tmp_path, capsys):
    counter = tmp_path / "count"
    code = run_launch_file(
        FIXTURES / "supervise_respawn.launch.xml", {"python": PY, "counter": str(counter), "forever": "true"}
    )
    assert code == 0
    assert len(counter.read_text().splitlines()) >= 3
    assert "[INFO] [counter-1]: respawning" in capsys.readouterr().out


def test_output_prefixes_and_failed_exit(capsys):
    code = run_launch_file(FIXTURES / "supervise_output.launch.xml", {"python": PY})
    assert code == 1  # all exited, one with a non-zero code
    captured = capsys.readouterr()
    assert "[echo-1] hello stdout\n" in captured.out
    assert "[echo-1] no newline\n" in captured.out  # partial last line is flushed
    assert "[echo-1] hello stderr\n" in captured.out  # the screen is stdout, as upstream's
    assert "[fails-2] exiting with 2\n" in captured.out
    assert "[ERROR] [fails-2]: process has died" in captured.out


def test_grandchildren_are_not_orphaned(tmp_path):
    # The shell exits at once, leaving a background sleep in its process group.
    pid_file = tmp_path / "grandchild"
    path = write_launch(tmp_path, f'<executable name="forker" cmd="sh -c \'sleep 30 &amp; echo $! &gt; {pid_file}\'"/>')
    assert run_launch_file(path, {}) == 0
    grandchild = int(pid_file.read_text())
    assert spin_until(lambda: not pid_alive(grandchild), 30)


def test_start_failure_shuts_down(tmp_path, capsys):
    path = write_launch(tmp_path, '<executable cmd="/nonexistent/binary --x"/>')
    assert run_launch_file(path, {}) == 1
    assert "failed to start" in capsys.readouterr().out


def test_run_print_only_does_not_start(tmp_path, capsys):
    marker = tmp_path / "marker"
    path = write_launch(tmp_path, f'<executable cmd="touch {marker}"/>')
    assert run_launch_file(path, {}, print_only=True) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"touch {marker}"
    assert not marker.exists()
