# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""The launch runner against upstream's documented behaviour, one rule per case.

Each case names the upstream rule it checks: the module of ros2/launch (``launch``, ``launch_xml``) or
ros2/launch_ros where that behaviour is defined, read at launch 3.7 / launch_ros rolling. Written from
those rules and their own tests (launch_xml/test, test_launch_ros/frontend), not from this runner's
code, so a difference from ``ros2 launch`` fails here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from vla_ros.launch_runner import LaunchError, LogMessage, ShutdownRequest, describe_arguments, main, parse_launch_file
from vla_ros.launch_runner.cli import run_launch_file

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

PY = sys.executable


@pytest.fixture(autouse=True)
def launch_log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ROS_LOG_DIR", str(tmp_path / "ros_log"))
    monkeypatch.delenv("OVERRIDE_LAUNCH_PROCESS_OUTPUT", raising=False)
    return tmp_path / "ros_log"


@pytest.fixture
def fake_pkg(tmp_path, monkeypatch):
    """An install prefix with package 'fake_pkg' and its executable lib/fake_pkg/fake_node."""
    prefix = tmp_path / "install"
    (prefix / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (prefix / "share" / "ament_index" / "resource_index" / "packages" / "fake_pkg").write_text("")
    (prefix / "share" / "fake_pkg").mkdir(parents=True)
    exe = prefix / "lib" / "fake_pkg" / "fake_node"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho fake\n")
    exe.chmod(0o755)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    return exe


def launch_file(tmp_path: Path, body: str, name: str = "case.launch.xml") -> Path:
    path = tmp_path / name
    path.write_text(f"<launch>\n{body}\n</launch>\n")
    return path


def plan(tmp_path: Path, body: str, args=None):
    return parse_launch_file(launch_file(tmp_path, body), args or {})


def refused(tmp_path: Path, body: str, args=None) -> str:
    with pytest.raises(LaunchError) as info:
        plan(tmp_path, body, args)
    return str(info.value)


def cmds(result) -> list:
    return [p.cmd for p in result.processes]


# ------------------------------------------------------------------ parsing (launch.frontend, launch_xml)


@pytest.mark.parametrize(
    "body, where, what",
    [
        ('<let name="a" value="1" valeu="2"/>', "<let> attribute 'valeu'", "unknown attribute"),
        ('<executable cmd="ls" outptu="screen"/>', "<executable> attribute 'outptu'", "unknown attribute"),
        ('<node pkg="p" exec="e" cmd="x"/>', "<node> attribute 'cmd'", "unknown attribute"),  # Node.parse ignores cmd
        ('<group><let name="a" value="1" bogus="x"/></group>', "<let> attribute 'bogus'", "unknown attribute"),
        ('<executable cmd="ls"><env name="A" value="1" extra="2"/></executable>', "<env> attribute 'extra'", "unknown"),
        (
            '<include file="x.xml"><arg name="a" value="1" default="2"/></include>',
            "<arg> attribute 'default'",
            "unknown",
        ),
        ('<executable cmd="ls"><whats_this/></executable>', "unknown tag <whats_this> inside <executable>", ""),
        ('<arg name="a"><whats_this/></arg>', "unknown tag <whats_this> inside <arg>", ""),
    ],
)
def test_unread_attributes_and_tags_are_errors(tmp_path, body, where, what):
    """launch_xml Entity.assert_entity_completely_parsed, called for every action by
    launch.frontend.expose (and for <env>, <include><arg>, <keep>, <param>, <remap> by their parsers):
    an attribute or nested tag the action did not read raises. The runner's error names file:line."""
    message = refused(tmp_path, body)
    assert f"case.launch.xml:2: {where}" in message and what in message


def test_the_whole_file_is_checked_before_anything_runs(tmp_path):
    """launch.frontend.Parser.parse_description parses every action (also under if="false", inside groups
    and timers) before the description executes."""
    message = refused(
        tmp_path,
        '<executable cmd="ls"/>\n<group if="false"><timer period="1"><let name="a" value="1" typo="x"/>'
        "</timer></group>",
    )
    assert ":3: <let> attribute 'typo'" in message


def test_unknown_tag_is_an_error(tmp_path):
    """launch.frontend.expose.instantiate_action: 'Unrecognized entity of the type: ...'."""
    assert ":2: unknown tag <nodee>" in refused(tmp_path, '<nodee pkg="p" exec="e"/>')


def test_missing_required_attribute_is_an_error(tmp_path):
    """launch_xml Entity.get_attr without optional=True raises when the attribute is absent."""
    assert ":2: <let> attribute 'value': missing required attribute" in refused(tmp_path, '<let name="a"/>')
    assert ":2: <node> attribute 'exec': missing required attribute" in refused(tmp_path, '<node pkg="p"/>')


@pytest.mark.parametrize(
    "attrs, message",
    [
        ('respawn_delay="-1"', "'respawn_delay': must be >= 0"),
        ('sigterm_timeout="-0.5"', "'sigterm_timeout': must be >= 0"),
        ('respawn_max_retries="two"', "'respawn_max_retries': expected a integer literal"),
        ('shell="$(var x)"', "'shell': takes a boolean literal"),
        ('respawn_delay="$(var d)"', "'respawn_delay': takes a number literal"),
        ('emulate_tty="maybe"', "'emulate_tty': expected a boolean"),
    ],
)
def test_typed_attributes_are_literals(tmp_path, attrs, message):
    """launch.actions.ExecuteProcess.parse reads shell/emulate_tty (bool), respawn_max_retries (int),
    respawn_delay/sigterm_timeout/sigkill_timeout (float, >= 0) with a data_type: coerced while parsing,
    never substituted (a substitution there is not evaluated upstream)."""
    assert message in refused(tmp_path, f'<executable cmd="ls" {attrs}/>')


def test_if_and_unless_together_are_refused(tmp_path):
    """launch.Action.parse: "if and unless conditions can't be used simultaneously"."""
    assert "can't be used simultaneously" in refused(tmp_path, '<let name="a" value="1" if="true" unless="false"/>')


@pytest.mark.parametrize(
    "value, message",
    [
        ("$(optenv HOME)", "unknown substitution '$(optenv)'"),  # ROS 1 only
        ("$(var  a)", "empty substitution argument"),  # two spaces
        ("$(var a )", "empty substitution argument"),
        ("$(var 'a'b)", "expected ' ' or ')'"),
        ("$(var a b c)", "'$(var)' expects 1 to 2 argument(s), got 3"),
        ("$(anon)", "'$(anon)' expects 1 argument(s), got 0"),
        ("$(eval max(1,2))", "unescaped '('"),
    ],
)
def test_substitution_grammar_and_names(tmp_path, value, message):
    """launch/share/launch/frontend/grammar.lark: arguments are separated by exactly one space, a
    quoted string is a whole argument, '(' must be escaped or quoted; instantiate_substitution refuses
    an unknown name and each substitution's parse() its argument count -- while parsing, so also here
    under if="false"."""
    result = refused(tmp_path, f'<let name="x" value="{value}" if="false"/>')
    assert message in result


# ------------------------------------------------------------------------- scoping (launch, launch_ros)


def test_include_sets_its_arguments_in_the_including_scope(tmp_path):
    """launch.actions.IncludeLaunchDescription.execute returns SetLaunchConfiguration actions for its
    <arg>s plus the included description, with no push/pop: everything stays set afterwards."""
    (tmp_path / "child.launch.xml").write_text(
        '<launch><arg name="rate" default="10"/><let name="inner" value="x"/>'
        '<push-ros-namespace namespace="child"/></launch>'
    )
    result = plan(
        tmp_path,
        '<include file="$(dirname)/child.launch.xml"><arg name="rate" value="50"/></include>\n'
        '<executable cmd="echo $(var rate) $(var inner) $(var ros_namespace)"/>',
    )
    assert cmds(result) == [["echo", "50", "x", "/child"]]


def test_a_scoped_group_restores_configurations_environment_and_namespace(tmp_path):
    """launch.actions.GroupAction (scoped=True, forwarding=True): Push/PopLaunchConfigurations and
    Push/PopEnvironment around its actions; scoped=False sets them in the current scope."""
    result = plan(
        tmp_path,
        '<group><let name="a" value="in"/><set_env name="VLA_G" value="1"/>'
        '<push-ros-namespace namespace="ns"/></group>\n'
        '<executable cmd="echo $(var a out) $(var ros_namespace none)"/>\n'
        '<group scoped="false"><let name="b" value="kept"/></group>\n'
        '<executable cmd="echo $(var b)"/>',
    )
    assert cmds(result) == [["echo", "out", "none"], ["echo", "kept"]]
    assert "VLA_G" not in result.processes[0].env


def test_group_without_forwarding_clears_everything_but_keep(tmp_path):
    """GroupAction(forwarding=False): ResetLaunchConfigurations(keep) and ResetEnvironment; <keep>
    values are evaluated before the reset (launch_xml test_group)."""
    result = plan(
        tmp_path,
        '<let name="foo" value="FOO"/><let name="bar" value="BAR"/><push-ros-namespace namespace="ns"/>\n'
        '<group scoped="true" forwarding="false"><keep name="bar" value="$(var bar)"/>'
        '<executable cmd="echo $(var foo none) $(var bar) $(var ros_namespace none)"/></group>',
    )
    assert cmds(result) == [["echo", "none", "BAR", "none"]]


def test_reset_keeps_only_keep(tmp_path):
    """launch.actions.ResetLaunchConfigurations: clears the configurations, then sets the <keep>s."""
    result = plan(
        tmp_path,
        '<let name="a" value="1"/><let name="b" value="2"/><reset><keep name="b" value="$(var b)"/></reset>'
        '<executable cmd="echo $(var a none) $(var b)"/>',
    )
    assert cmds(result) == [["echo", "none", "2"]]


def test_anon_is_a_launch_configuration(tmp_path):
    """launch.substitutions.AnonName stores the name as launch configuration 'anon<name>': the same
    within a scope, readable with $(var), forgotten when a scoped group ends."""
    result = plan(
        tmp_path,
        '<group><executable cmd="echo $(anon n) $(anon n) $(var anonn)"/></group>\n<executable cmd="echo $(anon n)"/>',
    )
    inside, outside = cmds(result)
    assert inside[1] == inside[2] == inside[3] and inside[1].startswith("n_")
    assert outside[1] != inside[1]


def test_set_parameter_inside_a_group_leaks_when_the_list_exists_outside(tmp_path, fake_pkg):
    """launch_ros SetParameter/SetRemap extend context.launch_configurations['global_params'/'ros_remaps']
    in place, and LaunchContext._push_launch_configurations copies the dict shallowly: with a list
    already outside, the group's entry stays after the group. The runner does the same and warns."""
    result = plan(
        tmp_path,
        '<set_parameter name="a" value="1"/>\n<group><set_parameter name="b" value="2"/></group>\n'
        '<group><set_remap from="x" to="y"/></group>\n'
        '<node pkg="fake_pkg" exec="fake_node"/>',
    )
    cmd = result.processes[0].cmd
    assert cmd[cmd.index("--ros-args") :] == ["--ros-args", "-p", "a:=1", "-p", "b:=2"]  # remap list began inside
    assert any(":3: <set_parameter> also applies after the enclosing <group> ends" in w for w in result.warnings)


def test_relative_include_path_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    """launch.actions.IncludeLaunchDescription._get_launch_file: os.path.abspath(location), i.e. the
    launch's working directory, not the including file's folder."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "child.launch.xml").write_text('<launch><let name="c" value="1"/></launch>')
    path = launch_file(tmp_path / "sub", '<include file="child.launch.xml"/>')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        LaunchError,
        match=r"case.launch.xml:2: <include> attribute 'file'.*does not exist.*"
        r"relative to the working directory",
    ):
        parse_launch_file(path)
    monkeypatch.chdir(tmp_path / "sub")
    assert parse_launch_file(path).configurations["c"] == "1"


# -------------------------------------------------------------------------------- processes (launch)


@pytest.mark.parametrize(
    "cmd, expected",
    [
        ("echo $(var a)", ["echo", "A B"]),  # a substitution's value is never split
        ("$(var a)/x y", ["A B/x", "y"]),  # a substitution joins the text it touches
        ("$(var a) $(var a)", ["A B", "A B"]),
        ('echo "x y" z', ["echo", "x y", "z"]),
        ("a b c d", ["a", "b", "c", "d"]),
    ],
)
def test_command_line_splitting(tmp_path, cmd, expected):
    """launch.actions.ExecuteProcess._parse_cmdline: each literal text fragment is shlex-split on its own,
    substitutions stay whole and attach to adjacent text."""
    assert cmds(plan(tmp_path, f"<executable cmd='{cmd}'/>", {"a": "A B"})) == [expected]


def test_a_quote_cannot_span_a_substitution(tmp_path):
    """ExecuteProcess._parse_cmdline shlex-splits "echo '" alone: 'No closing quotation'."""
    assert "No closing quotation" in refused(tmp_path, "<executable cmd=\"echo '$(var a) x'\"/>", {"a": "1"})


def test_launch_prefix_configuration_filter_and_attribute(tmp_path):
    """launch.descriptions.Executable: the prefix defaults to the 'launch-prefix' configuration, applied
    when 'launch-prefix-filter' (a regex) matches the executable's basename; a launch-prefix attribute
    wins regardless of the filter. The label is the basename of the final cmd[0] plus a counter."""
    body = (
        '<executable cmd="/bin/echo a"/><executable cmd="/bin/true"/>'
        '<executable cmd="/bin/true" launch-prefix="nice -n 5"/>'
    )
    result = plan(tmp_path, body, {"launch-prefix": "time -p", "launch-prefix-filter": "ec.*"})
    assert cmds(result) == [["time", "-p", "/bin/echo", "a"], ["/bin/true"], ["nice", "-n", "5", "/bin/true"]]
    assert [p.label for p in result.processes] == ["time-1", "true-2", "nice-3"]


def test_output_routing(tmp_path, launch_log_dir, capsys):
    """launch.logging.get_output_loggers: 'log' (the default) sends stdout to the launch log file only
    and stderr also to the screen; 'screen' both to the screen; 'own_log' to <name>-stdout.log,
    <name>-stderr.log and <name>.log. The screen handler writes to stdout."""
    script = "echo out; echo err &gt;&amp;2"
    body = (
        f'<executable name="quiet" cmd="sh -c \'{script}\'"/>'
        f'<executable name="loud" output="screen" cmd="sh -c \'{script}\'"/>'
        f'<executable name="own" output="own_log" cmd="sh -c \'{script}\'"/>'
    )
    assert run_launch_file(launch_file(tmp_path, body), {}) == 0
    screen = capsys.readouterr().out
    assert "[quiet-1] err" in screen and "[quiet-1] out" not in screen
    assert "[loud-2] out" in screen and "[loud-2] err" in screen
    assert "[own-3]" not in screen.replace("[INFO] [own-3]", "")
    run_dir = next(p for p in launch_log_dir.iterdir() if p.name != "latest")
    assert (launch_log_dir / "latest").resolve() == run_dir.resolve()
    launch_log = (run_dir / "launch.log").read_text()
    assert "[quiet-1] out" in launch_log and "[quiet-1] err" in launch_log and "[own-3] out" not in launch_log
    assert (run_dir / "own-3-stdout.log").read_text() == "[own-3] out\n"
    assert (run_dir / "own-3-stderr.log").read_text() == "[own-3] err\n"
    assert sorted((run_dir / "own-3.log").read_text().splitlines()) == ["[own-3] err", "[own-3] out"]


def test_invalid_output_is_refused_and_the_override_variable_wins(tmp_path, monkeypatch):
    """launch.logging._normalize_output_configuration raises for an unknown alias;
    ExecuteLocal.__init__ takes OVERRIDE_LAUNCH_PROCESS_OUTPUT from the environment over the attribute."""
    assert "attribute 'output': 'scren' is not a valid output" in refused(
        tmp_path, '<executable cmd="ls" output="scren"/>'
    )
    monkeypatch.setenv("OVERRIDE_LAUNCH_PROCESS_OUTPUT", "screen")
    assert plan(tmp_path, '<executable cmd="ls" output="log"/>').processes[0].output == "screen"


def test_emulate_tty_attribute_and_configuration(tmp_path, capsys):
    """launch.actions.ExecuteLocal: emulate_tty gives the process a terminal; the 'emulate_tty' launch
    configuration, when set, wins over the attribute."""
    check = f"{PY} -c 'import sys; print(sys.stdout.isatty())'"
    body = (
        f'<executable name="tty" output="screen" emulate_tty="true" cmd="{check}"/><executable name="pipe" '
        f'output="screen" cmd="{check}"/>'
    )
    assert run_launch_file(launch_file(tmp_path, body), {}) == 0
    screen = capsys.readouterr().out
    assert "[tty-1] True" in screen and "[pipe-2] False" in screen
    assert [p.emulate_tty for p in plan(tmp_path, body, {"emulate_tty": "false"}).processes] == [False, False]


# ----------------------------------------------------------------------- timer, log, shutdown (launch)


def test_timer_defers_its_actions_with_the_configurations_it_saw(tmp_path):
    """launch.actions.TimerAction: its actions run once the period has passed, after the rest of the
    description (so their process numbers come later); since ros2/launch#836 they see the launch
    configurations as they were when the timer executed, and their own changes do not leak."""
    result = plan(
        tmp_path,
        '<group><let name="who" value="inner"/>'
        '<timer period="$(var wait)"><executable cmd="echo $(var who)"/><let name="leak" value="1"/></timer></group>\n'
        '<executable cmd="echo first"/>\n<timer period="0.5"><log message="half"/></timer>\n'
        '<executable cmd="echo $(var leak none)"/>',
        {"wait": "2"},
    )
    items = [(type(i).__name__, i.delay_s) for i in result.items]
    assert items == [("ProcessSpec", 0.0), ("ProcessSpec", 0.0), ("LogMessage", 0.5), ("ProcessSpec", 2.0)]
    assert cmds(result) == [["echo", "first"], ["echo", "none"], ["echo", "inner"]]
    assert [p.label for p in result.processes] == ["echo-1", "echo-2", "echo-3"]


def test_timer_period_must_be_a_number(tmp_path):
    """TimerAction.parse: period is a float or a substitution typed as float when the timer runs."""
    assert "attribute 'period': 'soon'" in refused(tmp_path, '<timer period="$(var p)"/>', {"p": "soon"})


def test_log_and_shutdown_run_in_order(tmp_path, capsys):
    """launch.actions.LogInfo logs its message on the 'launch.user' logger when executed;
    launch.actions.Shutdown ends the launch (processes get SIGINT) with its reason."""
    body = (
        '<log message="hello $(var who)"/><executable name="sleeper" output="screen" cmd="sleep 30"/>'
        '<timer period="0.3"><shutdown reason="enough"/></timer>'
    )
    result = plan(tmp_path, body, {"who": "you"})
    assert isinstance(result.items[0], LogMessage) and isinstance(result.items[-1], ShutdownRequest)
    assert run_launch_file(launch_file(tmp_path, body), {"who": "you"}) == 0
    screen = capsys.readouterr().out
    assert "[INFO] [launch.user]: hello you" in screen and "shutdown requested: enough" in screen
    assert screen.index("hello you") < screen.index("process started") < screen.index("enough")


# ---------------------------------------------------------------------------------- nodes (launch_ros)


def test_node_package_must_be_in_the_ament_index(tmp_path, fake_pkg):
    """launch_ros ExecutableInPackage.perform: <prefix>/lib/<pkg>/<exec> of the indexed package, else
    SubstitutionFailure -- never a lookup on $PATH."""
    assert plan(tmp_path, '<node pkg="fake_pkg" exec="fake_node"/>').processes[0].cmd[0] == str(fake_pkg)
    assert "executable 'sh' of package 'not_indexed' not found" in refused(
        tmp_path, '<node pkg="not_indexed" exec="sh"/>'
    )
    assert "executable 'ls' not found in the libexec directory" in refused(tmp_path, '<node pkg="fake_pkg" exec="ls"/>')


def test_node_command_line_layout(tmp_path, fake_pkg):
    """launch_ros Node: exec, args, [--ros-args ros_args], --ros-args, -r __node, -r __ns, then global
    parameters (-p name:=value, --params-file for <set_parameters_from_file>), the node's parameter
    files, then global and own remappings."""
    (tmp_path / "g.yaml").write_text("/**:\n  ros__parameters:\n    g: 1\n")
    result = plan(
        tmp_path,
        '<push-ros-namespace namespace="robot"/><set_parameter name="use_sim_time" value="true"/>'
        '<set_parameters_from_file filename="$(dirname)/g.yaml"/><set_remap from="a" to="b"/>'
        '<node pkg="fake_pkg" exec="fake_node" name="n" args="--x 1" ros_args="--log-level warn">'
        '<param name="p" value="2"/><remap from="c" to="d"/></node>',
    )
    cmd = result.processes[0].cmd
    generated = result.processes[0].node.params_files[-1].path
    assert cmd == [
        str(fake_pkg),
        "--x",
        "1",
        "--ros-args",
        "--log-level",
        "warn",
        "--ros-args",
        "-r",
        "__node:=n",
        "-r",
        "__ns:=/robot",
        "-p",
        "use_sim_time:=True",
        "--params-file",
        str(tmp_path / "g.yaml"),
        "--params-file",
        generated,
        "-r",
        "a:=b",
        "-r",
        "c:=d",
    ]
    # Name and namespace known: the file names the node (launch_ros _create_params_file_from_dict).
    assert yaml.safe_load(Path(generated).read_text()) == {"/robot/n": {"ros__parameters": {"p": 2}}}


def test_param_substitution_reads_set_parameter(tmp_path):
    """launch_ros substitutions.Parameter: the first <set_parameter> of that name in scope, as str() of
    its typed value; else the default; else an error."""
    result = plan(
        tmp_path,
        '<set_parameter name="rate" value="10"/><set_parameter name="on" value="true"/>'
        '<set_parameter name="rate" value="20"/>'
        '<executable cmd="echo $(param rate) $(param on) $(param missing dflt)"/>',
    )
    assert cmds(result) == [["echo", "10", "True", "dflt"]]
    assert "parameter 'nope' not found" in refused(tmp_path, '<let name="x" value="$(param nope)"/>')


def test_file_content_substitution(tmp_path):
    """launch.substitutions.FileContent: the file's text; a missing file is 'File not found: <path>'."""
    (tmp_path / "text.txt").write_text("hello")
    assert cmds(plan(tmp_path, '<executable cmd="echo $(file-content $(dirname)/text.txt)"/>')) == [["echo", "hello"]]
    assert "File not found: " in refused(tmp_path, '<let name="x" value="$(file-content $(dirname)/none.txt)"/>')


def test_missing_parameter_file_is_skipped_with_a_warning(tmp_path, fake_pkg):
    """launch_ros Node._perform_substitutions: 'Parameter file path is not a file' is a warning and the
    file is left out."""
    result = plan(tmp_path, '<node pkg="fake_pkg" exec="fake_node"><param from="$(dirname)/absent.yaml"/></node>')
    assert "--params-file" not in result.processes[0].cmd
    assert any("Parameter file path is not a file" in w and ":2:" in w for w in result.warnings)


@pytest.mark.parametrize(
    "attrs, expected",
    [
        ('value="2, 5, 8" value-sep=", "', [2, 5, 8]),
        ('value="$(var a_list)"', [2, 5, 8]),
        ('value="$(var a_string)"', "[2, 5, 8]"),
        ('value="2., 5., 8." value-sep=", "', [2.0, 5.0, 8.0]),
        ("value=\"'2', '5', '8'\" value-sep=\", \"", ["2", "5", "8"]),
        ("value=\"&quot;'2'&quot;, &quot;'5'&quot;\" value-sep=\", \"", ["'2'", "'5'"]),
        ("value=\"'\\asd', '\\bsd'\" value-sep=\", \"", ["asd", "bsd"]),
        ("value=\"''\"", ""),
        ('value="$(var my_value)" type="str"', "100"),
        ('value="\'2\', \'5\'" value-sep=", " type="list_of_str"', ["'2'", "'5'"]),
        ('value="2, 5, 8" value-sep=", " type="list_of_str"', ["2", "5", "8"]),
    ],
)
def test_param_value_typing(tmp_path, fake_pkg, attrs, expected):
    """launch_ros Node.parse_nested_parameters + evaluate_parameters, as test_launch_ros'
    frontend/test_node_frontend.py (params 3-15) pins them."""
    args = {"a_list": "[2, 5, 8]", "a_string": "'[2, 5, 8]'", "my_value": "100"}
    result = plan(tmp_path, f'<node pkg="fake_pkg" exec="fake_node"><param name="p" {attrs}/></node>', args)
    assert result.processes[0].node.parameters == {"p": expected}


@pytest.mark.parametrize(
    "param, message",
    [
        ('<param name="p" from="x.yaml"/>', "'name' and 'from' are mutually exclusive"),
        ('<param name="p" value="1"><param name="q" value="2"/></param>', "nested parameters and value attributes"),
        ('<param name="p" allow_substs="true" value="1"/>', "can only be used together with 'from'"),
        ('<param from="x.yaml" value="1"/>', "unknown attribute(s) value"),
    ],
)
def test_param_forms(tmp_path, fake_pkg, param, message):
    """launch_ros Node.parse_nested_parameters: a 'from' file (with allow_substs) or a named value or
    nested params, never mixed."""
    assert message in refused(tmp_path, f'<node pkg="fake_pkg" exec="fake_node">{param}</node>')


def test_set_use_sim_time_is_refused_with_the_reason(tmp_path):
    """launch_ros SetUseSimTime sets use_sim_time on launch's own internal node only (used by
    <ros_timer>), not on the nodes it starts."""
    message = refused(tmp_path, '<set_use_sim_time value="true"/>')
    assert "<set_use_sim_time> is not supported" in message and '<set_parameter name="use_sim_time"' in message


def test_push_ros_namespace_is_a_launch_configuration(tmp_path):
    """launch_ros PushROSNamespace stores the composed namespace as launch configuration 'ros_namespace'."""
    result = plan(
        tmp_path,
        '<push-ros-namespace namespace="a"/><push_ros_namespace namespace="b"/>'
        '<executable cmd="echo $(var ros_namespace)"/>',
    )
    assert cmds(result) == [["echo", "/a/b"]]


def test_append_env(tmp_path, monkeypatch):
    """launch.actions.AppendEnvironmentVariable: appends (or prepends) with os.pathsep unless a separator
    is given; sets the variable when unset."""
    monkeypatch.setenv("VLA_APPEND", "a")
    result = plan(
        tmp_path,
        '<append_env name="VLA_APPEND" value="b"/><append_env name="VLA_APPEND" value="c" prepend="true" '
        'separator=";"/><append_env name="VLA_NEW" value="x"/><executable cmd="true"/>',
    )
    env = result.processes[0].env
    assert env["VLA_APPEND"] == f"c;a{os.pathsep}b" and env["VLA_NEW"] == "x"


def test_argument_choices(tmp_path):
    """launch.actions.DeclareLaunchArgument.execute: a value outside the choices is an error; the
    description gains "Valid choices are: [...]"."""
    body = '<arg name="mode" default="a" description="Mode"><choice value="a"/><choice value="b"/></arg>'
    assert "argument 'mode' got 'c', which is not one of the valid choices ['a', 'b']" in refused(
        tmp_path, body, {"mode": "c"}
    )
    assert describe_arguments(launch_file(tmp_path, body))[0].description == "Mode. Valid choices are: ['a', 'b']"


def test_show_args_and_print_walk_the_file_like_a_run(tmp_path, capsys):
    """ros2 launch --show-args lists every reachable <arg> (conditional ones marked); here it is the same
    walker as a run, so a typo fails it exactly as it fails the run."""
    good = launch_file(
        tmp_path,
        '<arg name="a" default="1"/><group if="$(var a)"><arg name="b" default="2"/></group>'
        '<timer period="1"><arg name="c" default="3"/></timer>',
    )
    assert [(a.name, a.conditional) for a in describe_arguments(good)] == [("a", False), ("b", True), ("c", True)]
    bad = launch_file(tmp_path, '<arg name="a" default="1" descripton="typo"/>', "bad.launch.xml")
    for flag in ("--show-args", "--print"):
        assert main([str(bad), flag]) == 1
        assert "bad.launch.xml:2: <arg> attribute 'descripton': unknown attribute" in capsys.readouterr().err


def test_deprecated_launch_file_warns(tmp_path):
    """launch.frontend.Parser.parse_description reads <launch deprecated="..."> and launch warns when
    such a description is included."""
    path = tmp_path / "old.launch.xml"
    path.write_text('<launch deprecated="use new.launch.xml"><let name="a" value="1"/></launch>')
    assert any("is deprecated: use new.launch.xml" in w for w in parse_launch_file(path).warnings)
