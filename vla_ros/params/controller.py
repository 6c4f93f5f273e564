"""controller_node's parameters and the core configuration they build. No rclpy import.

Each parameter says which ``ControllerConfig`` field it sets (``field``) and which way a run-time change is
stricter (``tighten``); the joint limits' parameters are ``vla_ros.params.limits``'s, shared with the safety
filter."""

from __future__ import annotations

from vla_ros.control import BLEND_MODES, ControllerConfig, bundled_urdf_path
from vla_ros.control.sources import UNNAMED_GRACE_S
from vla_ros.params import common, limits
from vla_ros.params.limits import lines
from vla_ros.params.robot import ROBOT_PROFILE, robot_files
from vla_ros.params.spec import ParamSpec, build_config, with_old_names
from vla_ros.params.tightening import LOWER, LOWER_NONZERO, OFF, rules_from_specs
from vla_ros.urdf_limits import commanded_joints_of

OUTPUT_INTERFACES = ("forward_position", "joint_trajectory", "isaac")
LOOP_MODES = ("auto", "inline", "thread", "timer")
SENSOR_QOS = ("reliable", "best_effort")
CONTROLLER_CHECKS = ("auto", "require", "disabled")  # not "off": YAML reads off as false
TRAJECTORY_STAMPS = ("now", "zero")


# The controller's former names of the joint limits' parameters (it shares the filter's names now).
_OLD_LIMIT_NAMES = {
    "default_acceleration_rad_s2": ("max_acceleration",),
    "default_acceleration_m_s2": ("max_acceleration_prismatic",),
}


def _period_from_rate(rate_hz):
    """diagnostics_rate_hz (the old name) as a period; a rate of 0 or less stays, for the range check to refuse."""
    return (
        1.0 / rate_hz
        if isinstance(rate_hz, (int, float)) and not isinstance(rate_hz, bool) and rate_hz > 0
        else rate_hz
    )


def _check_trusted(names) -> str | None:
    if not any(n.strip() for n in names):
        return "trusted_publishers must name at least one node (the safety filter)"
    return None


def _check_joints(names) -> str | None:
    names = lines(names)
    if len(set(names)) != len(names):
        return f"joints repeat: {list(names)}"
    return None


PARAMS = [
    ParamSpec(
        "rate_hz",
        100.0,
        "control rate on the node's clock (wall or simulated time)",
        read_only=True,
        min_value=10.0,
        max_value=1000.0,
        min_reason="slower, a control period is longer than the chunks' point spacing (20 Hz shipped)",
        field=True,
    ),
    ParamSpec(
        "joints",
        [""],
        "controlled joints in output order (the forward controller's array order); chunks and joint states are matched "
        "by name; empty = the robot profile's (arm, then gripper), else the URDF's moving joints that mimic none",
        read_only=True,
        check=_check_joints,
    ),
    ROBOT_PROFILE,
    ParamSpec(
        "output_interface",
        "forward_position",
        "forward_position: Float64MultiArray on /<position_controller>/commands; joint_trajectory: JointTrajectory on "
        "/<trajectory_controller>/joint_trajectory; isaac: JointState on isaac_topic",
        read_only=True,
        choices=OUTPUT_INTERFACES,
    ),
    ParamSpec(
        "position_controller",
        "forward_position_controller",
        "ros2_control forward position controller name",
        read_only=True,
    ),
    ParamSpec(
        "trajectory_controller",
        "joint_trajectory_controller",
        "ros2_control joint trajectory controller name",
        read_only=True,
    ),
    ParamSpec(
        "isaac_topic",
        "/joint_command",
        "JointState command topic of Isaac Sim's articulation controller",
        read_only=True,
    ),
    ParamSpec(
        "trajectory_points",
        5,
        "joint_trajectory output: points of look-ahead per message, one period apart",
        min_value=1,
        max_value=50,
    ),
    ParamSpec(
        "robot_description_file",
        "",
        "URDF giving position and velocity limits; empty = the robot profile's, else the bundled vla_arm.urdf",
        read_only=True,
    ),
    *(with_old_names(s, *_OLD_LIMIT_NAMES.get(s.name, ())) for s in limits.PARAMS),
    ParamSpec(
        "blend_mode",
        "crossfade",
        "how a new chunk takes over: crossfade (mix over the horizon) or freeze (keep freeze_periods of the old plan, "
        "then one cubic)",
        choices=BLEND_MODES,
        field=True,
    ),
    ParamSpec(
        "blend_horizon_s",
        0.2,
        "time a new chunk takes to take over (stretched if the limits need it)",
        min_value=0.01,
        max_value=2.0,
        min_reason="one control period at 100 Hz is the shortest take-over",
        field=True,
    ),
    ParamSpec(
        "freeze_periods",
        3,
        "blend_mode freeze: control periods of the old plan kept unchanged",
        min_value=0,
        max_value=50,
        field=True,
    ),
    ParamSpec(
        "chunk_timeout_s",
        0.5,
        "no new chunk from a trusted publisher for this long (wall or ROS time) is reported at WARN: the policy or "
        "filter is dead, frozen or refusing everything (the running chunk still ends with a stop)",
        min_value=0.2,
        max_value=60.0,
        min_reason=common.CHUNK_TIMEOUT_REASON,
        tighten=LOWER,
    ),
    ParamSpec(
        "max_future_stamp_s",
        0.5,
        "reject chunks stamped further ahead of the node's clock",
        min_value=0.001,
        max_value=10.0,
        min_reason=common.CLOCK_SYNC_REASON,
        field="max_chunk_future_s",
        tighten=LOWER,
        old_names=("max_chunk_future_s",),
    ),
    ParamSpec(
        "joint_state_timeout_s",
        0.5,
        "stop when no joint state arrived for this long",
        min_value=0.02,
        max_value=10.0,
        min_reason=common.JOINT_STATE_TIMEOUT_REASON,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "use_chunk_velocities",
        False,
        "use a chunk's velocities as spline tangents when it has them; default: monotone cubic slopes, which keep the "
        "path between waypoints",
        field=True,
        tighten=OFF,
    ),
    ParamSpec(
        "max_chunk_points",
        256,
        "longest chunk accepted (buffers are preallocated for it)",
        read_only=True,
        min_value=1,
        max_value=10000,
        field=True,
    ),
    ParamSpec("start_enabled", True, "send commands from the start; false: wait for ~/enable", read_only=True),
    common.diagnostics_period(max_value=10.0, old_names=("diagnostics_rate_hz",), from_old=_period_from_rate),
    ParamSpec(
        "loop_stats_window",
        1000,
        "control cycles the loop timing percentiles cover",
        read_only=True,
        min_value=10,
        max_value=1000000,
    ),
    ParamSpec(
        "loop_mode",
        "auto",
        "auto: inline on wall time, timer on simulated time; inline: one thread runs the cycles at absolute deadlines "
        "on the monotonic clock and serves callbacks in between (wall time only); thread: the cycles in their own "
        "thread beside the executor's (wall time only); timer: an rclpy timer on the executor, driven by the node's "
        "clock",
        read_only=True,
        choices=LOOP_MODES,
    ),
    ParamSpec(
        "loop_spin_us",
        300,
        "inline and thread modes: busy-wait this long before each deadline instead of sleeping (0 = sleep only)",
        min_value=0,
        max_value=2000,
        min_positive=10,
        min_reason="a spin under 10 us is shorter than a sleep's wake-up jitter and changes nothing (0 = sleep only)",
    ),
    ParamSpec(
        "realtime_priority",
        0,
        "SCHED_FIFO priority of the thread running the loop (inline and timer modes: the one thread; thread mode: the "
        "loop thread, with the executor's one step below it; 0 = normal scheduling; needs CAP_SYS_NICE or an rtprio "
        "limit, else a warning)",
        read_only=True,
        min_value=0,
        max_value=99,
    ),
    ParamSpec(
        "sensor_qos",
        "reliable",
        "/joint_states subscription: reliable (ros2_control's joint_state_broadcaster, the sim, Isaac by default) or "
        "best_effort (drivers publishing with SensorDataQoS; a reliable subscription never hears them)",
        read_only=True,
        choices=SENSOR_QOS,
    ),
    ParamSpec(
        "controller_check",
        "auto",
        "before sending to a ros2_control controller (forward_position, joint_trajectory), fetch its joints parameter "
        "and send nothing if it does not fit (forward: same order; JTC: same set). auto: send unverified when the "
        "receiver is not a ros2_control controller or does not answer in time; require: send only once verified; "
        "disabled: no check",
        read_only=True,
        choices=CONTROLLER_CHECKS,
    ),
    ParamSpec(
        "controller_check_timeout_s",
        5.0,
        "controller_check auto: how long a subscribing controller node may take to answer",
        read_only=True,
        min_value=0.5,
        max_value=120.0,
        min_reason="a first service call waits for DDS discovery, commonly a few hundred ms: a shorter wait gives up "
        "on a controller that is there",
    ),
    ParamSpec(
        "trajectory_stamp",
        "now",
        "joint_trajectory output: now = stamped with this node's clock, so JTC plays each message at absolute times "
        "(latency and jitter compensated; needs the controller manager's clock in sync, as /clock is in simulation); "
        "zero = stamp 0, JTC starts each message on arrival (immune to a clock offset between machines, not to jitter)",
        read_only=True,
        choices=TRAJECTORY_STAMPS,
    ),
    ParamSpec(
        "max_chunk_age_s",
        2.0,
        "refuse a chunk, or stop executing it, once its stamp (observation time) is older than this",
        min_value=0.02,
        max_value=60.0,
        min_reason="under two control periods at 100 Hz every chunk is stale before it can be executed",
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "path_tolerance_rad",
        0.3,
        "revolute joints: a measured position further than this from every command of the last 0.25 s drops the plan "
        "and re-anchors at the measured state, ramping the command there at the limits (the arm was reset or moved by "
        "someone else); 0 = not checked",
        min_value=0.0,
        max_value=3.2,
        min_positive=0.001,
        min_reason="under 1 mrad encoder noise and quantization drop the plan with the arm at rest (0 = not checked)",
        field=True,
        tighten=LOWER_NONZERO,
    ),
    ParamSpec(
        "path_tolerance_m",
        0.0,
        "prismatic joints: as path_tolerance_rad, in metres; 0 = not checked (a gripper closed on an object)",
        min_value=0.0,
        max_value=1.0,
        min_positive=0.001,
        min_reason="under 1 mm a gripper's encoder noise drops the plan with the arm at rest (0 = not checked)",
        field=True,
        tighten=LOWER_NONZERO,
    ),
    common.CLOCK_TIMEOUT,
    ParamSpec(
        "trusted_publishers",
        ["safety_filter"],
        "nodes whose chunks are executed (fully qualified, or relative to the controller's namespace); a chunk that "
        "can have come from any other publisher is refused as unauthorized_source",
        read_only=True,
        check=_check_trusted,
    ),
    ParamSpec(
        "unnamed_publisher_grace_s",
        UNNAMED_GRACE_S,
        "a chunk publisher whose node the ROS graph has not named yet (names arrive after DDS discovery, seconds "
        "later on a busy machine) is reported as a stranger only once unnamed this long (wall time); its chunks are "
        "refused all the same. A DDS writer outside ROS never gets a name",
        min_value=1.0,
        max_value=600.0,
        min_reason="under 1 s the filter's own publisher is reported as a stranger while its name is on the way",
        read_only=True,
    ),
    ParamSpec(
        "trusted_state_publishers",
        [""],
        "nodes whose /joint_states are used when several publish the same joints (fully qualified, or relative to the "
        "controller's namespace); states from any other publisher are refused as joint_state_untrusted_source. Empty: "
        "every publisher is used, publishers naming disjoint joints (an arm driver, a gripper driver) are merged by "
        "name, and two naming the same joint are a conflict: the arm holds until one stops (ERROR on /diagnostics). "
        "Per message on Kilted and later (rclpy passes each message's publisher); on Humble and Jazzy a set list "
        "refuses every state while a publisher not on it is on the topic",
        read_only=True,
    ),
    ParamSpec(
        "allow_runtime_loosening",
        False,
        "allow runtime parameter changes that loosen a limit or a timeout (logged at WARN); false: only tightening is "
        "accepted",
        read_only=True,
    ),
]

# Runtime changes that would loosen a limit or a timeout are refused unless allow_runtime_loosening.
TIGHTENING_RULES = rules_from_specs(PARAMS)


def config_from_params(p: dict) -> ControllerConfig:
    """ControllerConfig from parameter values (limits from the URDF, tightened by the joint limits' settings).
    Raises ValueError with the reason."""
    files = robot_files(p)
    urdf = files.urdf or bundled_urdf_path()
    joints = lines(p["joints"]) or files.joints or commanded_joints_of(urdf)
    return build_config(ControllerConfig.from_urdf, PARAMS, p, urdf, list(joints))
