"""sim_node's parameters (the MuJoCo simulation behind the usual robot interfaces). No rclpy import."""

from __future__ import annotations

from vla_ros.params.spec import ParamSpec

_DIVIDES = "a rate is a positive divisor of physics_rate_hz"

PARAMS = [
    ParamSpec(
        "robot_profile",
        "",
        "robot to simulate: a robot profile's name (fr3) or YAML file (docs/your_robot.md); empty = the bundled arm",
        read_only=True,
    ),
    ParamSpec(
        "robot_description_file",
        "",
        "deprecated: a URDF to simulate with the bundled arm's profile (its joints, TCP, cameras); use robot_profile",
        read_only=True,
    ),
    ParamSpec(
        "seed",
        0,
        "episode seed used by the initial episode and by ~/reset (cup positions)",
        min_value=0,
        max_value=2**31 - 1,
    ),
    ParamSpec(
        "real_time_factor",
        1.0,
        "simulated seconds per wall second; 0 = as fast as possible",
        min_value=0.0,
        max_value=100.0,
        min_positive=0.01,
        min_reason="slower than 1/100 of real time /clock (200 Hz simulated) comes 0.5 s of wall time apart or more, "
        "and the nodes' clock watchdogs (clock_timeout_s 0.5 s) report the simulator dead",
    ),
    ParamSpec(
        "physics_rate_hz",
        600,
        "physics steps per simulated second",
        read_only=True,
        min_value=100,
        max_value=10000,
        min_reason="the rates below divide it, and /joint_states at 100 Hz (what the controller expects) needs 100 "
        "steps a second",
    ),
    ParamSpec(
        "joint_state_rate_hz",
        100,
        "/joint_states rate in simulated time (divides physics_rate_hz)",
        read_only=True,
        min_value=1,
        max_value=1000,
        min_reason=_DIVIDES,
    ),
    ParamSpec(
        "camera_rate_hz",
        30,
        "camera rate in simulated time (divides physics_rate_hz)",
        read_only=True,
        min_value=1,
        max_value=120,
        min_reason=_DIVIDES,
    ),
    ParamSpec(
        "clock_rate_hz",
        200,
        "/clock rate in simulated time (divides physics_rate_hz)",
        read_only=True,
        min_value=1,
        max_value=10000,
        min_reason=_DIVIDES,
    ),
    ParamSpec("image_width", 320, "camera image width in pixels", read_only=True, min_value=16, max_value=1920),
    ParamSpec("image_height", 240, "camera image height in pixels", read_only=True, min_value=16, max_value=1080),
    ParamSpec("camera_frame_id", "camera_optical_frame", "frame_id of images and camera_info", read_only=True),
    ParamSpec(
        "wrist_camera",
        False,
        "also render the camera on the hand: /wrist_camera/image_raw + camera_info (frame wrist_camera_optical_frame), "
        "same size and rate; off saves one render per frame when no model reads it",
        read_only=True,
    ),
    ParamSpec("publish_clock", True, "publish /clock (turn off when another node owns simulated time)", read_only=True),
    ParamSpec(
        "reset_clock_on_reset",
        False,
        "restart simulated time at 0 on ~/reset (as Gazebo does); default keeps time monotonic",
    ),
    ParamSpec(
        "position_controller",
        "forward_position_controller",
        "forward controller name: commands on /<name>/commands",
        read_only=True,
    ),
    ParamSpec(
        "trajectory_controller",
        "joint_trajectory_controller",
        "trajectory controller name: /<name>/joint_trajectory",
        read_only=True,
    ),
    ParamSpec(
        "episode_status_rate_hz",
        10.0,
        "rate of /vla/episode_status in simulated time",
        read_only=True,
        min_value=0.1,
        max_value=100.0,
        min_reason="a status less often than every 10 s reports an episode's outcome late",
    ),
    ParamSpec(
        "reset_hold_s",
        0.5,
        "after ~/reset, for this long (simulated) position commands more than 0.05 rad/m from the reset pose are "
        "refused until one within it arrives (commands sent before the reset must not yank the arm back); 0 = off",
        min_value=0.0,
        max_value=60.0,
        min_positive=0.02,
        min_reason="shorter than two periods of the 100 Hz controller it ends before the commands sent just before the "
        "reset arrive",
    ),
]
