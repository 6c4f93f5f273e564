"""Parameter tables: validation reasons, declaration on a real rclpy node, docs/parameters.md in sync."""

import math
from pathlib import Path

import pytest
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter

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
    assert rate.validate(0.5) == "rate_hz=0.5 is below the minimum 1.0"
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
        "s.config_from_params({x.name: x.default for x in s.PARAMS}); "
        "bad = [m for m in sys.modules if m == 'rclpy' or m.startswith('rclpy.') or m.startswith('vla_ros.nodes')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- arrays and types (issue 14: no double[] could be set at run time; types named by number) ---------
ARRAYS = [
    ParamSpec("box_m", [-0.9, -0.9, -0.1], "box", check=lambda v: None if len(v) == 3 else f"box_m needs 3 values, got {v}"),
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
    assert box.validate([1.0, "b", 2.0]) == "box_m expects double[] (a list of numbers), got a mixed list [1.0, 'b', 2.0]"
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
    results = node.set_parameters([box, _service_value("counts", [5, 6]), _service_value("names", ["q", "r"]),
                                   _service_value("flags", [False])])
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
        return None if all(a < b for a, b in zip(v["box_m"], [5.0, 5.0, 5.0])) and v["rate_hz"] < 50 else "box_m must lie below 5 m at rate_hz < 50"

    node = Node("p5")
    changes = []
    declare_parameters(node, SPECS + ARRAYS, on_change=lambda n, v: changes.append((n, v)), check=ordered)
    result = node.set_parameters_atomically([Parameter("rate_hz", value=20.0), Parameter("box_m", value=[9.0, 0.0, 0.0])])
    assert not result.successful and result.reason == "box_m must lie below 5 m at rate_hz < 50"
    assert changes == [] and node.get_parameter("rate_hz").value == 10.0
    assert node.set_parameters_atomically([Parameter("rate_hz", value=20.0), Parameter("box_m", value=[1.0, 0.0, 0.0])]).successful
    assert changes == [("rate_hz", 20.0), ("box_m", [1.0, 0.0, 0.0])]
    node.destroy_node()
    bad_start = Node("p6", parameter_overrides=[Parameter("rate_hz", value=60.0)])
    with pytest.raises(ParameterError, match="box_m must lie below 5 m"):
        declare_parameters(bad_start, SPECS + ARRAYS, check=ordered)
    bad_start.destroy_node()


def test_wrong_initial_types_refuse_to_start_with_the_types_in_words(ros):
    node = Node("p7", parameter_overrides=[Parameter("box_m", value="abc"), Parameter("width", value=2.5),
                                           Parameter("names", value=[1, 2])])
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

    cmd = [sys.executable, "-m", "vla_ros.nodes.safety_filter_node", "--ros-args",
           "-p", f"robot_description_file:={REPO / 'vla_ros' / 'description' / 'vla_arm.urdf'}", *ros_args]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_safety_filter_process_refuses_a_wrong_workspace_type_at_start_up():
    proc = _run_filter("-p", "workspace_min_m:=abc")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "cannot start" in out and "workspace_min_m expects double[] (a list of numbers), got string 'abc'" in out, out


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
        assert not wrong.successful and wrong.reason == "workspace_min_m expects double[] (a list of numbers), got string 'abc'"
        short = set_value("workspace_min_m", [0.0, 0.0])
        assert not short.successful and short.reason == "workspace_min_m needs 3 values (x, y, z), got [0.0, 0.0]"
        not_int = set_value("max_points", 2.5)
        assert not not_int.successful and not_int.reason == "max_points expects int (an integer), got double 2.5"
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
