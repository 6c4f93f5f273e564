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
    assert rate.validate("fast") == "rate_hz must be of type double, got 'fast'"
    assert SPECS[2].validate(True) == "width must be of type int, got True"


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
    assert not wrong_type.successful and "must be of type double" in wrong_type.reason
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
