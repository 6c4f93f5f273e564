"""Parameter tables: validation reasons, declaration on a real rclpy node, docs/parameters.md in sync."""

import math
import re
from pathlib import Path

import pytest
import rclpy
from hypothesis import given, settings
from hypothesis import strategies as st
from rclpy.node import Node
from rclpy.parameter import Parameter

from vla_ros.params import node_tables
from vla_ros.ros.params import ParameterError, ParamSpec, declare_parameters
from vla_ros.tools.param_docs import DOC_PATH, document

REPO = Path(__file__).resolve().parents[1]
SPECS = [
    ParamSpec("rate_hz", 10.0, "rate", min_value=1.0, max_value=100.0),
    ParamSpec("mode", "a", "mode", choices=("a", "b")),
    ParamSpec("width", 320, "width", read_only=True, min_value=16, max_value=1920),
]


def test_validate_reasons_name_the_parameter_and_value():
    rate = SPECS[0]
    assert rate.validate(50.0) is None
    assert rate.validate(0.5) == "rate_hz=0.5 is below the minimum 1.0 (allowed: [1, 100])"
    assert "above the maximum" in rate.validate(200.0)
    assert "NaN" in rate.validate(math.nan)
    assert SPECS[1].validate("c") == "mode='c' is not one of ['a', 'b']"
    assert rate.validate(5) is None  # an int is fine for a double
    assert rate.validate("fast") == "rate_hz expects double (a number), got string 'fast'"
    assert SPECS[2].validate(True) == "width expects int (an integer), got bool True"


def test_integer_override_for_a_double_is_accepted(ros):
    node = Node("p0", parameter_overrides=[Parameter("rate_hz", Parameter.Type.INTEGER, 0)])
    with pytest.raises(ParameterError, match="rate_hz=0.0 is below the minimum 1.0"):
        declare_parameters(node, SPECS)
    node.destroy_node()
    node = Node("p3", parameter_overrides=[Parameter("rate_hz", Parameter.Type.INTEGER, 5)])
    assert declare_parameters(node, SPECS)["rate_hz"] == 5.0
    node.destroy_node()


@pytest.fixture
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def test_bad_initial_value_refuses_to_start(ros):
    node = Node("p1", parameter_overrides=[Parameter("mode", Parameter.Type.STRING, "zzz")])
    with pytest.raises(ParameterError, match="mode='zzz'"):
        declare_parameters(node, SPECS)
    node.destroy_node()


def test_runtime_change_is_validated_and_applied_only_when_valid(ros):
    node = Node("p2")
    changes = []
    values = declare_parameters(node, SPECS, on_change=lambda n, v: changes.append((n, v)))
    assert values == {"rate_hz": 10.0, "mode": "a", "width": 320}
    bad = node.set_parameters([Parameter("rate_hz", Parameter.Type.DOUBLE, 500.0)])[0]
    assert not bad.successful and "rate_hz" in bad.reason
    wrong_type = node.set_parameters([Parameter("rate_hz", Parameter.Type.STRING, "fast")])[0]
    assert not wrong_type.successful and wrong_type.reason == "rate_hz expects double (a number), got string 'fast'"
    bad_choice = node.set_parameters([Parameter("mode", Parameter.Type.STRING, "q")])[0]
    assert not bad_choice.successful and "not one of" in bad_choice.reason
    ro = node.set_parameters([Parameter("width", Parameter.Type.INTEGER, 64)])[0]
    assert not ro.successful
    assert changes == []
    ok = node.set_parameters([Parameter("rate_hz", Parameter.Type.DOUBLE, 20.0)])[0]
    assert ok.successful and changes == [("rate_hz", 20.0)]
    assert node.get_parameter("rate_hz").value == 20.0
    desc = node.describe_parameter("width")
    assert desc.read_only and desc.integer_range[0].from_value == 16
    node.destroy_node()


def test_parameter_reference_matches_the_code():
    assert DOC_PATH == REPO / "docs" / "parameters.md"
    assert DOC_PATH.read_text() == document(), "docs/parameters.md is stale: run `vla-ros params --write`"
    for node in ("policy_node", "safety_filter_node", "controller_node", "sim_node", "scripted_motion_node"):
        assert f"## `{node}`" in document()


def test_duration_conversion_rounds_to_whole_nanoseconds():
    from vla_ros.ros.time import duration_msg_from_s, seconds_from_duration_msg

    d = duration_msg_from_s(0.9999999999)
    assert (d.sec, d.nanosec) == (1, 0)
    d = duration_msg_from_s(2.25)
    assert (d.sec, d.nanosec) == (2, 250_000_000) and seconds_from_duration_msg(d) == 2.25


def test_parameter_tables_import_no_rclpy_and_no_node():
    """Offline tools (evaluation, benchmarks, docs) read the tables without a ROS graph."""
    import subprocess
    import sys

    code = (
        "import sys; import vla_ros.params as p; p.node_tables(); import vla_ros.params.safety_filter as s; "
        "s.config_from_params({x.name: x.default for x in s.PARAMS}); bad = [m for m in sys.modules if m == 'rclpy' "
        "or m.startswith('rclpy.') or m.startswith('vla_ros.nodes')]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- arrays and types (issue 14: no double[] could be set at run time; types named by number) ---------
ARRAYS = [
    ParamSpec(
        "box_m", [-0.9, -0.9, -0.1], "box", check=lambda v: None if len(v) == 3 else f"box_m needs 3 values, got {v}"
    ),
    ParamSpec("counts", [1, 2], "counts", min_value=0, max_value=10),
    ParamSpec("names", ["a"], "names"),
    ParamSpec("flags", [True, False], "flags"),
]


def test_array_values_are_typed_coerced_and_refused_in_words():
    import array

    box, counts, names, flags = ARRAYS
    assert [s.type_name for s in ARRAYS] == ["double[]", "int[]", "string[]", "bool[]"]
    # what rclpy hands over for a double[] / int[] set through the SetParameters service
    assert box.validate(array.array("d", [0.0, 1.0, 2.0])) is None
    assert box.coerce(array.array("d", [0.0, 1.0, 2.0])) == [0.0, 1.0, 2.0]
    assert counts.validate(array.array("q", [3, 4])) is None and counts.coerce(array.array("q", [3, 4])) == [3, 4]
    assert box.coerce([-1, -1, 0]) == [-1.0, -1.0, 0.0] and box.validate([-1, -1, 0]) is None  # YAML ints
    assert names.validate(["x", "y"]) is None and flags.validate([False]) is None
    assert box.validate("abc") == "box_m expects double[] (a list of numbers), got string 'abc'"
    assert box.validate(["a", "b", "c"]) == "box_m expects double[] (a list of numbers), got string[] ['a', 'b', 'c']"
    assert (
        box.validate([1.0, "b", 2.0]) == "box_m expects double[] (a list of numbers), got a mixed list [1.0, 'b', 2.0]"
    )
    assert box.validate([1.0, 2.0]) == "box_m needs 3 values, got [1.0, 2.0]"  # the table's own check, on a list
    assert "NaN" in box.validate([0.0, math.nan, 1.0])
    assert counts.validate([True]) == "counts expects int[] (a list of integers), got bool[] [True]"
    assert counts.validate([1.5]) == "counts expects int[] (a list of integers), got double[] [1.5]"
    assert counts.validate([3, 11]) == "counts element 11 is above the maximum 10"
    assert names.validate([1, 2]) == "names expects string[] (a list of strings), got int[] [1, 2]"
    assert flags.validate(1.0) == "flags expects bool[] (a list of true/false values), got double 1.0"
    assert SPECS[0].validate(None) == "rate_hz expects double (a number), got no value (the parameter was unset)"


def _service_value(name: str, value) -> Parameter:
    """A parameter as rclpy's SetParameters service hands it to the node (double[] as array('d'))."""
    return Parameter.from_parameter_msg(Parameter(name, value=value).to_parameter_msg())


def test_runtime_array_changes_apply_and_wrong_types_are_refused_in_words(ros):
    import array

    node = Node("p4")
    changes = []
    values = declare_parameters(node, SPECS + ARRAYS, on_change=lambda n, v: changes.append((n, v)))
    assert values["box_m"] == [-0.9, -0.9, -0.1] and values["counts"] == [1, 2]
    box = _service_value("box_m", [-1.0, -1.0, 0.0])
    assert isinstance(box.value, array.array)  # the case that could never be set
    results = node.set_parameters(
        [box, _service_value("counts", [5, 6]), _service_value("names", ["q", "r"]), _service_value("flags", [False])]
    )
    assert all(r.successful for r in results), [r.reason for r in results]
    assert changes == [("box_m", [-1.0, -1.0, 0.0]), ("counts", [5, 6]), ("names", ["q", "r"]), ("flags", [False])]
    assert list(node.get_parameter("box_m").value) == [-1.0, -1.0, 0.0]
    changes.clear()
    ints = node.set_parameters([_service_value("box_m", [-2, -2, 0])])[0]  # `ros2 param set ... "[-2, -2, 0]"`
    assert ints.successful and changes == [("box_m", [-2.0, -2.0, 0.0])], ints.reason
    changes.clear()
    refused = [
        ("box_m", "abc", "box_m expects double[] (a list of numbers), got string 'abc'"),
        ("box_m", [1.0, 2.0], "box_m needs 3 values, got [1.0, 2.0]"),
        ("counts", 3, "counts expects int[] (a list of integers), got int 3"),
        ("rate_hz", [1.0], "rate_hz expects double (a number), got double[] [1.0]"),
        ("width", 64, "Trying to set a read-only parameter: width."),
    ]
    for name, value, reason in refused:
        result = node.set_parameters([_service_value(name, value)])[0]
        assert not result.successful and result.reason == reason, (name, value, result.reason)
    assert changes == []
    # rclpy types dynamic parameters by each value offered; the descriptor keeps the table's type
    from rcl_interfaces.msg import ParameterType

    assert node.describe_parameter("box_m").type == ParameterType.PARAMETER_DOUBLE_ARRAY
    assert node.describe_parameter("rate_hz").type == ParameterType.PARAMETER_DOUBLE
    assert node.set_parameters([Parameter("rate_hz", Parameter.Type.INTEGER, 20)])[0].successful
    assert node.describe_parameter("rate_hz").type == ParameterType.PARAMETER_DOUBLE
    node.destroy_node()


def test_a_request_takes_effect_only_when_the_whole_configuration_is_valid(ros):
    """``check`` sees every value as it would be after the change; a refusal changes nothing."""

    def ordered(v):
        return (
            None
            if all(a < b for a, b in zip(v["box_m"], [5.0, 5.0, 5.0])) and v["rate_hz"] < 50
            else "box_m must lie below 5 m at rate_hz < 50"
        )

    node = Node("p5")
    changes = []
    declare_parameters(node, SPECS + ARRAYS, on_change=lambda n, v: changes.append((n, v)), check=ordered)
    result = node.set_parameters_atomically(
        [Parameter("rate_hz", value=20.0), Parameter("box_m", value=[9.0, 0.0, 0.0])]
    )
    assert not result.successful and result.reason == "box_m must lie below 5 m at rate_hz < 50"
    assert changes == [] and node.get_parameter("rate_hz").value == 10.0
    assert node.set_parameters_atomically(
        [Parameter("rate_hz", value=20.0), Parameter("box_m", value=[1.0, 0.0, 0.0])]
    ).successful
    assert changes == [("rate_hz", 20.0), ("box_m", [1.0, 0.0, 0.0])]
    node.destroy_node()
    bad_start = Node("p6", parameter_overrides=[Parameter("rate_hz", value=60.0)])
    with pytest.raises(ParameterError, match="box_m must lie below 5 m"):
        declare_parameters(bad_start, SPECS + ARRAYS, check=ordered)
    bad_start.destroy_node()


def test_wrong_initial_types_refuse_to_start_with_the_types_in_words(ros):
    node = Node(
        "p7",
        parameter_overrides=[
            Parameter("box_m", value="abc"),
            Parameter("width", value=2.5),
            Parameter("names", value=[1, 2]),
        ],
    )
    with pytest.raises(ParameterError) as err:
        declare_parameters(node, SPECS + ARRAYS)
    text = str(err.value)
    assert "box_m expects double[] (a list of numbers), got string 'abc'" in text
    assert "width expects int (an integer), got double 2.5" in text
    assert "names expects string[] (a list of strings), got int[] [1, 2]" in text
    node.destroy_node()
    ok = Node("p8", parameter_overrides=[Parameter("box_m", value=[-1, -1, 0])])  # YAML [-1, -1, 0]: ints
    assert declare_parameters(ok, SPECS + ARRAYS)["box_m"] == [-1.0, -1.0, 0.0]
    ok.destroy_node()


def _run_filter(*ros_args: str, timeout: float = 120.0):
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "vla_ros.nodes.safety_filter_node",
        "--ros-args",
        "-p",
        f"robot_description_file:={REPO / 'vla_ros' / 'description' / 'vla_arm.urdf'}",
        *ros_args,
    ]
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def test_safety_filter_process_refuses_a_wrong_workspace_type_at_start_up():
    proc = _run_filter("-p", "workspace_min_m:=abc")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "cannot start" in out and "workspace_min_m expects double[] (a list of numbers), got string 'abc'" in out, (
        out
    )


def test_safety_filter_workspace_is_set_at_run_time_on_a_real_process(ros):
    """The SetParameters service (what `ros2 param set` calls) on the node process: double[] values apply,
    wrong types and sizes are refused with the reason in words."""
    import os
    import signal

    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import DescribeParameters, GetParameters, SetParameters
    from ros_helpers import Probe

    proc = _run_filter()
    probe = Probe("params_probe")
    try:
        set_client = probe.node.create_client(SetParameters, "/safety_filter/set_parameters")
        get_client = probe.node.create_client(GetParameters, "/safety_filter/get_parameters")
        describe = probe.node.create_client(DescribeParameters, "/safety_filter/describe_parameters")

        def set_value(name, value):
            request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
            return probe.call(set_client, request, wall_timeout_s=60).results[0]

        ok = set_value("workspace_min_m", [-0.5, -0.6, -0.05])
        assert ok.successful, ok.reason
        got = probe.call(get_client, GetParameters.Request(names=["workspace_min_m"])).values[0]
        assert got.type == ParameterType.PARAMETER_DOUBLE_ARRAY and list(got.double_array_value) == [-0.5, -0.6, -0.05]
        assert set_value("workspace_max_m", [1, 1, 2]).successful  # integers for a double[]
        wrong = set_value("workspace_min_m", "abc")
        assert (
            not wrong.successful
            and wrong.reason == "workspace_min_m expects double[] (a list of numbers), got string 'abc'"
        )
        short = set_value("workspace_min_m", [0.0, 0.0])
        assert not short.successful and short.reason == "workspace_min_m needs 3 values (x, y, z), got [0.0, 0.0]"
        not_int = set_value("max_chunk_points", 2.5)
        assert not not_int.successful and not_int.reason == "max_chunk_points expects int (an integer), got double 2.5"
        got = probe.call(get_client, GetParameters.Request(names=["workspace_min_m"])).values[0]
        assert list(got.double_array_value) == [-0.5, -0.6, -0.05]  # refusals changed nothing
        desc = probe.call(describe, DescribeParameters.Request(names=["workspace_max_m"])).descriptors[0]
        assert desc.type == ParameterType.PARAMETER_DOUBLE_ARRAY  # the table's type, though ints were set
        assert proc.poll() is None
    finally:
        probe.close()
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]


# ---- lower bounds that mean something (issue 44, item 4b: 1e-300 was a valid velocity_scale) -----------------
TABLES = node_tables()
SPEC = {node: {s.name: s for s in table} for node, table in TABLES.items()}
# Numbers whose name makes them a scale, factor, tolerance, margin, clearance, timeout, period, horizon, age,
# rate or duration: each needs a lower bound that means something.
BOUNDED_NAME = re.compile(r"scale|factor|tolerance|timeout|_s$|_us$|margin|clearance|clamp|rate|_hz$")
BOUNDED = [
    (node, s)
    for node, table in TABLES.items()
    for s in table
    if s.type_name in ("int", "double") and BOUNDED_NAME.search(s.name)
]


def _floor(spec: ParamSpec) -> float:
    """The smallest value the parameter takes other than 0 (where 0 means off)."""
    return spec.min_positive if spec.min_positive is not None else spec.min_value


def test_min_positive_keeps_zero_as_off_and_refuses_what_lies_between():
    from vla_ros.params.spec import markdown_table

    tol = ParamSpec(
        "tol_rad",
        0.3,
        "tolerance; 0 = not checked",
        min_value=0.0,
        max_value=3.2,
        min_positive=0.001,
        min_reason="under 1 mrad noise trips it",
    )
    assert (
        tol.validate(0.0) is None
        and tol.validate(0) is None
        and tol.validate(0.001) is None
        and tol.validate(3.2) is None
    )
    assert tol.validate(1e-300) == (
        "tol_rad=1e-300 is between 0 and the smallest value that works, 0.001 (allowed: 0, or [0.001, 3.2]): under 1 "
        "mrad noise trips it"
    )
    assert (
        tol.validate(-0.1)
        == "tol_rad=-0.1 is below the minimum 0.0 (allowed: 0, or [0.001, 3.2]): under 1 mrad noise trips it"
    )
    assert "| 0, or [0.001, 3.2] |" in markdown_table([tol])
    spin = ParamSpec("spin_us", 300, "busy-wait (0 = sleep only)", min_value=0, max_value=2000, min_positive=10)
    assert spin.validate(0) is None and spin.validate(10) is None
    assert (
        spin.validate(9) == "spin_us=9 is between 0 and the smallest value that works, 10 (allowed: 0, or [10, 2000])"
    )
    with pytest.raises(ValueError, match="min_positive"):
        ParamSpec("x", 1.0, "x", min_value=0.5, max_value=2.0, min_positive=0.7)  # 0 is not allowed at all
    with pytest.raises(ValueError, match="above max_value"):
        ParamSpec("x", 1.0, "x", min_value=0.0, max_value=2.0, min_positive=3.0)
    with pytest.raises(ValueError, match="min_positive"):
        ParamSpec("x", "a", "x", min_value=0, min_positive=1)


def test_every_scale_tolerance_timeout_and_rate_has_a_positive_lower_bound_with_its_reason():
    """Every such number of every node: a positive minimum, or 0 documented as off with a positive smallest
    other value; the refusal says why; the bound itself and the shipped default are taken; 1e-300 is not."""
    names = {f"{node}.{s.name}" for node, s in BOUNDED}
    assert {
        "controller_node.velocity_scale",
        "safety_filter_node.velocity_scale",
        "controller_node.path_tolerance_rad",
        "policy_node.rate_hz",
        "sim_node.real_time_factor",
        "safety_filter_node.chunk_timeout_s",
    } <= names
    for node, s in BOUNDED:
        where = f"{node}.{s.name}"
        assert s.min_value is not None, f"{where} has no lower bound"
        if s.min_positive is None:
            assert s.min_value > 0, f"{where}: its range [{s.min_value}, {s.max_value}] takes 0 and values next to it"
        else:
            assert s.min_value == 0 and re.search(r"\b0 =", s.description), (
                f"{where}: 0 is taken, but not documented as off"
            )
        assert s.min_reason, f"{where}: a lower bound without the reason why"
        assert s.validate(_floor(s)) is None and s.validate(s.default) is None, where
        tiny = s.validate(1e-300 if s.type_name == "double" else 1)
        if s.type_name == "double" or _floor(s) > 1:
            assert tiny is not None and tiny.startswith(s.name), where


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_no_bounded_parameter_takes_a_value_between_zero_and_its_bound(data):
    node, s = data.draw(st.sampled_from(BOUNDED), label="parameter")
    floor = _floor(s)
    if s.type_name == "double":
        value = data.draw(st.floats(min_value=0.0, max_value=floor, exclude_min=True, exclude_max=True), label="value")
    else:
        if floor <= 1:
            assert s.validate(0) is None if s.min_positive is not None else s.validate(0) is not None
            return
        value = data.draw(st.integers(min_value=1, max_value=int(math.ceil(floor)) - 1), label="value")
    reason = s.validate(value)
    assert reason is not None, f"{node}.{s.name} takes {value!r} below its bound {floor}"
    assert reason.startswith(f"{s.name}={value!r} ") and f"(allowed: {s.range_text()}): {s.min_reason}" in reason, (
        reason
    )
    assert (s.validate(0) is None) == (s.min_positive is not None), (
        f"{node}.{s.name}: 0 is taken exactly when it means off"
    )


# (node, parameter): velocity_scale, path_tolerance_rad, a timeout of each node that has one, rates
REPRESENTATIVE = [
    ("controller_node", "velocity_scale"),
    ("controller_node", "path_tolerance_rad"),
    ("controller_node", "joint_state_timeout_s"),
    ("controller_node", "controller_check_timeout_s"),
    ("safety_filter_node", "velocity_scale"),
    ("safety_filter_node", "chunk_timeout_s"),
    ("safety_filter_node", "tracking_tolerance_rad"),
    ("policy_node", "rate_hz"),
    ("policy_node", "source_timeout_s"),
    ("policy_node", "temporal_ensemble_s"),
    ("sim_node", "real_time_factor"),
    ("sim_node", "reset_hold_s"),
    ("scripted_motion_node", "speed_scale"),
]


def _declare_like_the_node(node_name: str, node):
    """What the node's constructor does with its table: the policy, the safety filter and the controller put
    their ParamGuard in front of the table's own check (the policy's builds nothing here: no model is loaded)."""
    from vla_ros.params import controller as controller_params
    from vla_ros.params import safety_filter as filter_params
    from vla_ros.ros.param_guard import ParamGuard

    table = TABLES[node_name]
    builds = {
        "controller_node": controller_params.config_from_params,
        "safety_filter_node": filter_params.config_from_params,
        "policy_node": lambda values: None,
    }
    if node_name not in builds:
        return declare_parameters(node, table), None
    guard = ParamGuard(node, table)
    values = declare_parameters(node, table, on_change=guard.on_change)
    guard.install(
        values,
        build=builds[node_name],
        apply=lambda built, values, changes: None,
        allow_loosening=values.get("allow_runtime_loosening", False),
    )
    return values, guard


def _below(floor: float) -> tuple[float, ...]:
    """1e-300, the largest double below the bound (inside rclpy's 1e-6 edge tolerance: the table's check must
    refuse it) and 10 % below it (rclpy's own range check refuses that first, where the range starts there)."""
    return (1e-300, math.nextafter(floor, 0.0), floor * 0.9)


def _ours(spec: ParamSpec, value: float) -> bool:
    """Whether the table's check, not rclpy's descriptor range, refuses ``value``: every value below the bound
    of a parameter whose range starts at 0 (off), and the ones within rclpy's edge tolerance of the bound."""
    return spec.min_positive is not None or math.isclose(value, spec.min_value, rel_tol=1e-6)


@pytest.mark.parametrize("node_name, name", REPRESENTATIVE)
def test_a_value_below_the_bound_stops_the_node_at_start_and_the_bound_starts_it(ros, node_name, name):
    spec = SPEC[node_name][name]
    floor = _floor(spec)
    for i, bad in enumerate(_below(floor)):
        node = Node(f"bound_start_{i}", parameter_overrides=[Parameter(name, value=bad)])
        try:
            with pytest.raises(ParameterError) as err:
                _declare_like_the_node(node_name, node)
        finally:
            node.destroy_node()
        text = str(err.value)
        assert name in text and repr(bad) in text, text
        if _ours(spec, bad):
            assert f"{name}={bad!r} " in text and f"(allowed: {spec.range_text()}): {spec.min_reason}" in text, text
        else:
            assert "out of range" in text and f"Min: {spec.min_value}" in text, text
    for good in (floor, 0.0) if spec.min_positive is not None else (floor,):
        node = Node("bound_start_ok", parameter_overrides=[Parameter(name, value=good)])
        try:
            values, _ = _declare_like_the_node(node_name, node)
            assert values[name] == good
            if spec.min_positive is not None:  # `ros2 param describe` says what the range [0, max] does not
                desc = node.describe_parameter(name)
                assert desc.floating_point_range[0].from_value == 0.0
                assert desc.additional_constraints.startswith(f"allowed: {spec.range_text()}"), (
                    desc.additional_constraints
                )
        finally:
            node.destroy_node()


@pytest.mark.parametrize("node_name, name", [(n, p) for n, p in REPRESENTATIVE if not SPEC[n][p].read_only])
def test_a_value_below_the_bound_is_refused_at_run_time_and_the_bound_is_taken(ros, node_name, name):
    """``ros2 param set`` (node.set_parameters runs the same callbacks as the SetParameters service)."""
    spec = SPEC[node_name][name]
    floor = _floor(spec)
    node = Node("bound_set")
    try:
        _, guard = _declare_like_the_node(node_name, node)
        was = node.get_parameter(name).value
        for bad in _below(floor):
            result = node.set_parameters([Parameter(name, value=bad)])[0]
            assert not result.successful and name in result.reason and repr(bad) in result.reason, (bad, result.reason)
            if _ours(spec, bad):
                assert f"(allowed: {spec.range_text()}): {spec.min_reason}" in result.reason, result.reason
            assert node.get_parameter(name).value == was
        ok = node.set_parameters([Parameter(name, value=floor)])[0]  # from the default down to the bound: tightening
        assert ok.successful, ok.reason
        assert node.get_parameter(name).value == floor
        if spec.min_positive is not None:
            from vla_ros.params.tightening import loosenings

            off = node.set_parameters([Parameter(name, value=0.0)])[0]
            if guard is not None and loosenings(guard.rules, {name: floor}, {name: 0.0}):
                # path_tolerance_rad 0 switches a check off: refused without allow_runtime_loosening, for that reason
                assert not off.successful and "allow_runtime_loosening" in off.reason, off.reason
            else:  # a margin's or a hold's 0 (off), or a tolerance's 0 that only tightens (every offset counts)
                assert off.successful, off.reason
    finally:
        node.destroy_node()


def test_a_tiny_tightening_is_refused_though_the_tightening_rules_alone_would_take_it(ros):
    """1e-300 is smaller than any tolerance or timeout, so to the tightening rules it only tightens; the guard
    asks each value's own spec first and refuses it, naming the parameter and why."""
    from vla_ros.params import controller as controller_params
    from vla_ros.params.spec import default_values
    from vla_ros.params.tightening import loosenings

    rules = controller_params.TIGHTENING_RULES
    base = default_values(controller_params.PARAMS)
    names = ("path_tolerance_rad", "joint_state_timeout_s", "max_chunk_age_s", "velocity_scale")
    for name in names:
        assert loosenings(rules, base, {**base, name: 1e-300}) == {}, name
    node = Node("tiny_tightening")
    try:
        _, guard = _declare_like_the_node("controller_node", node)
        for name in names:
            result = node.set_parameters([Parameter(name, value=1e-300)])[0]
            assert not result.successful and name in result.reason, result.reason
        # path_tolerance_rad's range starts at 0 (off), so rclpy lets 1e-300 through: the guard refuses it
        assert guard.refused == 1 and guard.last_refusal.startswith("path_tolerance_rad=1e-300 is between 0 and")
        assert [node.get_parameter(n).value for n in names] == [base[n] for n in names]
    finally:
        node.destroy_node()


# ---- old names, one declaration per parameter ----------------------------------------------------------
class _WarnRecorder:
    """A node logger that keeps the warnings (rclpy's own writes to the console, out of the test's reach)."""

    def __init__(self, logger):
        self._logger, self.warnings = logger, []

    def warning(self, message, *args, **kw):
        self.warnings.append(message)

    def __getattr__(self, name):
        return getattr(self._logger, name)


class _RecordingNode(Node):
    def get_logger(self):
        if not hasattr(self, "_recorder"):
            self._recorder = _WarnRecorder(super().get_logger())
        return self._recorder


def test_an_old_parameter_name_still_works_with_a_deprecation_warning(ros):
    """A renamed parameter's old name, given at start-up or set at run time, sets the new one, with a warning
    naming both; the new name wins where both are given; the run-time checks (the guard's tightening) see the
    new name."""
    from vla_ros.params import controller
    from vla_ros.ros.param_guard import ParamGuard

    specs = [s for s in controller.PARAMS if s.name in ("max_future_stamp_s", "diagnostics_period_s")]
    old = [Parameter("max_chunk_future_s", value=0.3), Parameter("diagnostics_rate_hz", value=4.0)]
    node = _RecordingNode("old_names", parameter_overrides=old)
    changes = []
    guard = ParamGuard(node, specs)  # the rules from the specs: max_future_stamp_s may only be lowered
    values = declare_parameters(node, specs, on_change=lambda n, v: (changes.append((n, v)), guard.on_change(n, v)))
    guard.install(values, build=dict, apply=lambda *a: None, allow_loosening=False)
    assert values == {"max_future_stamp_s": 0.3, "diagnostics_period_s": 0.25}  # a rate in Hz became a period
    warned = node.get_logger().warnings
    assert any("max_chunk_future_s" in w and "max_future_stamp_s" in w and "deprecated" in w for w in warned), warned
    assert any("diagnostics_rate_hz" in w and "diagnostics_period_s" in w for w in warned), warned
    assert not node.has_parameter("max_chunk_future_s") and node.get_parameter("max_future_stamp_s").value == 0.3
    if hasattr(node, "add_pre_set_parameters_callback"):  # Jazzy and later
        warned.clear()
        ok = node.set_parameters([Parameter("max_chunk_future_s", Parameter.Type.DOUBLE, 0.2)])[0]
        assert ok.successful, ok.reason
        assert node.get_parameter("max_future_stamp_s").value == 0.2 and changes == [("max_future_stamp_s", 0.2)]
        assert any("max_chunk_future_s" in w and "max_future_stamp_s" in w for w in warned), warned
        looser = node.set_parameters([Parameter("max_chunk_future_s", Parameter.Type.DOUBLE, 0.4)])[0]
        assert not looser.successful and looser.reason.startswith("max_future_stamp_s"), looser.reason
        assert node.get_parameter("max_future_stamp_s").value == 0.2
    node.destroy_node()
    both = [Parameter("max_chunk_future_s", value=0.3), Parameter("max_future_stamp_s", value=0.1)]
    node = _RecordingNode("old_and_new", parameter_overrides=both)
    assert declare_parameters(node, specs)["max_future_stamp_s"] == 0.1  # the new name wins
    node.destroy_node()


def test_old_names_in_parameter_files_and_the_wildcard_section(tmp_path):
    """values_from_yaml reads parameter files as a real rclpy node does, in both orders of a /** file and the
    node's own (rcl applies the sections in the order their keys first appear; the oracle is a node started
    with the same --params-file arguments); old names are used for the new ones, with the warning, unless those
    are given too."""
    from vla_ros.params import controller
    from vla_ros.params.spec import values_from_yaml

    limits = tmp_path / "limits.yaml"
    limits.write_text("/**:\n  ros__parameters:\n    velocity_scale: 0.5\n    max_acceleration: 6.0\n")
    own = tmp_path / "controller.yaml"
    own.write_text("/**/controller:\n  ros__parameters:\n    velocity_scale: 0.8\n    diagnostics_rate_hz: 2.0\n")
    for files, scale in (([own, limits], 0.5), ([limits, own], 0.8)):
        warned = []
        values = values_from_yaml(controller.PARAMS, files, "controller", warn=warned.append)
        assert values["velocity_scale"] == scale, files  # the section whose key appears later wins
        assert values["default_acceleration_rad_s2"] == 6.0 and values["diagnostics_period_s"] == 0.5
        assert "max_acceleration" not in values and "diagnostics_rate_hz" not in values
        assert len(warned) == 2 and all("deprecated" in w for w in warned)
        context = rclpy.Context()
        args = ["--ros-args"] + [a for f in files for a in ("--params-file", str(f))]
        rclpy.init(args=args, context=context)
        try:
            node = Node("controller", context=context)
            declared = declare_parameters(node, controller.PARAMS)
            node.destroy_node()
        finally:
            rclpy.shutdown(context=context)
        names = ("velocity_scale", "default_acceleration_rad_s2", "diagnostics_period_s")
        assert {n: declared[n] for n in names} == {n: values[n] for n in names}, files


def test_each_parameter_is_declared_once_with_its_field_and_its_tightening_rule():
    """The configurations and the tightening tables are built from the specs: every SafetyConfig field has
    exactly one parameter; the controller's fields name ControllerConfig's (or its URDF builder's); each
    node's tightening table is its specs' rules; no node keeps a parameter under two names."""
    import dataclasses
    import inspect

    from vla_ros.control import ControllerConfig
    from vla_ros.params import controller, safety_filter
    from vla_ros.params.spec import renamed
    from vla_ros.safety import SafetyConfig

    fields = [s.field_name for s in safety_filter.PARAMS if s.field_name]
    assert sorted(fields) == sorted(f.name for f in dataclasses.fields(SafetyConfig))
    builder = set(inspect.signature(ControllerConfig.from_urdf).parameters)
    config_fields = {f.name for f in dataclasses.fields(ControllerConfig)}
    for s in controller.PARAMS:
        if s.field_name:
            assert s.field_name in builder | config_fields, s.name
    assert safety_filter.tightening_rules().keys() == {s.name for s in safety_filter.PARAMS if s.tighten}
    assert controller.TIGHTENING_RULES.keys() == {s.name for s in controller.PARAMS if s.tighten}
    for node, specs in node_tables().items():
        names = {s.name for s in specs}
        assert not names & set(renamed(specs)), node  # an old name is no parameter of its own
    # One concept, one name: the filter and the controller share these.
    shared = {s.name for s in safety_filter.PARAMS} & {s.name for s in controller.PARAMS}
    assert {"max_future_stamp_s", "velocity_scale", "default_acceleration_rad_s2", "limit_overrides"} <= shared
    for specs in (safety_filter.PARAMS, controller.PARAMS):  # the shared spec checks each line in both
        overrides = next(s for s in specs if s.name == "limit_overrides")
        assert overrides.validate(["elbow_joint: velocity=1.5", ""]) is None
        assert "must look like" in overrides.validate(["elbow_joint velocity=1.5"])
