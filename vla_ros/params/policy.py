"""policy_node's parameters (timed tokens -> streaming Transformer -> action chunks) and the session
configuration they build. No rclpy import."""

from __future__ import annotations

from vla_ros.params import common
from vla_ros.params.robot import ROBOT_PROFILE, robot_files
from vla_ros.params.spec import ParamSpec, build_config

DEFAULT_MODEL = "vla_cups"


def _check_model(value: str) -> str | None:
    if not value.strip():
        return "model must name a model folder or a model under models/, got ''"
    return None


PARAMS = [
    ParamSpec(
        "model",
        DEFAULT_MODEL,
        "model folder, or a name under the package's models/ (changeable: the new model is loaded and checked first; "
        "one that fails is refused with the reason and the running one stays)",
        check=_check_model,
    ),
    ParamSpec(
        "backend",
        "onnx",
        "inference backend (onnx: ONNX Runtime on the folder's model.onnx, 2x faster per tick on a CPU; torch: the "
        "safetensors weights)",
        read_only=True,
        choices=("torch", "onnx"),
    ),
    ParamSpec("device", "auto", "auto = CUDA when available, else CPU; or cpu, cuda, cuda:1", read_only=True),
    ParamSpec(
        "threads", 0, "CPU threads for inference (0 = library default)", read_only=True, min_value=0, max_value=256
    ),
    ParamSpec(
        "rate_hz",
        10.0,
        "tick rate on the node's clock (0 = tick only on frames)",
        read_only=True,
        min_value=0.0,
        max_value=200.0,
        min_positive=0.5,
        min_reason="ticks more than 2 s apart leave the arm standing between chunks (the shipped model's chunks cover "
        "0.8 s); 0 ticks on camera frames only",
    ),
    ParamSpec("tick_on_frame", False, "also tick whenever a camera frame is accepted"),
    ParamSpec("instruction", "", "task in words; also settable on /vla/instruction (the newest wins)"),
    ParamSpec(
        "max_instruction_bytes",
        1024,
        "an instruction (on /vla/instruction or in instruction) of more bytes of UTF-8 is refused before any work: "
        "instruction_too_long, counted and WARN on /diagnostics, the one in force stays. The text encoder reads at "
        "most 30 word pieces (max_text_tokens less [CLS] and [SEP]): ~150 bytes of everyday English, ~600 of its "
        "longest words, ~90 of CJK",
        min_value=256,
        max_value=16384,
        min_reason="30 word pieces of English take up to ~600 bytes: a lower bound would refuse instructions the "
        "encoder reads whole",
    ),
    ParamSpec(
        "min_instruction_interval_s",
        0.5,
        "a new instruction is encoded at most this often (wall time); one arriving sooner waits and a newer one "
        "replaces it (the replaced one refused as instruction_flood, counted and WARN): a flood costs one encoding "
        "per interval and the newest wins; encoding runs beside the ticks, never before one (0 = each as soon as the "
        "encoder is free)",
        min_value=0.0,
        max_value=10.0,
        min_positive=0.05,
        min_reason="encoding one takes tens of milliseconds: a shorter interval bounds nothing (0 says so)",
    ),
    ParamSpec(
        "check_instructions",
        True,
        "check every instruction before the policy reads it (policy.grounding: the task's word rules, then the "
        "model folder's learned score): one the model cannot ground (a negation, a colour or object the scene lacks, "
        "two targets, another request) is refused with WARN, published on ~/instruction_status, and no chunk goes out "
        "until an accepted one arrives (false: every instruction is taken unchecked)",
        field=True,
    ),
    ParamSpec(
        "instruction_threshold",
        -1.0,
        "the instruction check's learned score below which an instruction is refused (negative: the threshold the "
        "model folder's grounding.json keeps); applies from the next instruction",
        min_value=-1.0,
        max_value=1.0,
        field=True,
        to_field=float,
    ),
    ParamSpec(
        "policy_instruction",
        "grounded",
        "what the policy reads of an accepted instruction: as_given (its words) or grounded (the task's own wording "
        "of the target the check found, e.g. 'pick up the red cup'); applies from the next instruction",
        choices=("as_given", "grounded"),
        field=True,
    ),
    ParamSpec(
        "publish_horizon",
        0,
        "chunk points to publish (0 = the model's whole chunk)",
        min_value=0,
        max_value=1000,
        field=True,
        to_field=int,
    ),
    ParamSpec(
        "chunk_smoothing_degree",
        3,
        "fit each joint's chunk with a polynomial in time of this degree before publishing (0 = off): removes "
        "point-to-point noise the safety filter would read as acceleration",
        min_value=0,
        max_value=8,
        field=True,
        to_field=int,
    ),
    ParamSpec(
        "temporal_ensemble_s",
        1.2,
        "average each chunk with the earlier chunks that cover its points, one decoded a seconds earlier weighing "
        "exp(-a / this) (0 = publish the newest decode alone)",
        min_value=0.0,
        max_value=10.0,
        min_positive=0.05,
        min_reason="with a shorter time constant a chunk decoded one tick (0.1 s) earlier weighs under exp(-2): the "
        "average is the newest decode alone, which 0 says",
        field=True,
        to_field=float,
    ),
    ParamSpec(
        "max_state_age_s",
        0.5,
        "newest joint state older than this on the node's clock at a tick: no chunk",
        min_value=0.02,
        max_value=60.0,
        min_reason=common.STATE_PERIODS_REASON,
        field=True,
        to_field=float,
        old_names=("max_observation_age_s",),
    ),
    ParamSpec(
        "image_transport",
        "raw",
        "camera input: raw (sensor_msgs/Image) or compressed (CompressedImage on <topic>/compressed)",
        read_only=True,
        choices=("raw", "compressed"),
    ),
    ParamSpec("image_topic", "/camera/image_raw", "camera topic (remapping works too)", read_only=True),
    ParamSpec(
        "sensor_qos",
        "reliable",
        "camera/joint subscriptions: reliable (the sim, most drivers) or best_effort (drivers using SensorDataQoS)",
        read_only=True,
        choices=("reliable", "best_effort"),
    ),
    ParamSpec(
        "input_width",
        0,
        "required camera width in pixels (0 = any; frames of another size are rejected)",
        read_only=True,
        min_value=0,
        max_value=8192,
        field=True,
        to_field=int,
    ),
    ParamSpec(
        "input_height",
        0,
        "required camera height in pixels (0 = any)",
        read_only=True,
        min_value=0,
        max_value=8192,
        field=True,
        to_field=int,
    ),
    common.diagnostics_period(min_value=0.05),
    ParamSpec(
        "debug_attention",
        False,
        "publish ~/attention_overlay (rgb8): the newest frame as the model crops it, with the heat map of its patches' "
        "attention to the instruction's colour word (all words when it names none); one full pass with attention "
        "weights after a chunk (backend onnx: the folder's torch weights are loaded for it); the topic exists only "
        "while this is true",
    ),
    ParamSpec(
        "debug_attention_rate_hz",
        2.0,
        "at most this many attention overlays per second (node clock)",
        min_value=0.1,
        max_value=30.0,
        min_reason="one overlay in more than 10 s shows no live attention (debug_attention false: none)",
    ),
    ParamSpec(
        "max_image_age_s",
        0.3,
        "newest camera frame older than this on the node's clock at a tick: no chunk (a policy without a recent image "
        "does not move the arm)",
        min_value=0.05,
        max_value=60.0,
        min_reason="camera frames come at 30 Hz (33 ms apart) plus transport: under 50 ms a fresh frame is refused",
        field=True,
        to_field=float,
    ),
    ParamSpec(
        "frozen_camera_s",
        1.0,
        "a camera whose frames stay byte for byte the same over this long of their stamps, fresh as the stamps are, "
        "while the joint states show the arm moving (a joint 0.02 rad or m from where it was), is frozen: WARN on "
        "/diagnostics ('camera frozen: N identical frames over X s') and, as for a stale image, no chunk (a policy "
        "whose eyes are frozen does not move the arm); the frames are still accepted and the first different one ends "
        "it. A still arm may rightly give one picture (a simulator without sensor noise). Stamps, not wall time: what "
        "the driver claims is new, the same in the sim and in a bag replay (0 = off)",
        min_value=0.0,
        max_value=60.0,
        min_positive=0.1,
        min_reason="a 30 Hz driver may send a frame twice when its sensor is late: over fewer than 3 frames a live "
        "camera would pass for frozen",
        field=True,
        to_field=float,
    ),
    ParamSpec(
        "source_timeout_s",
        0.5,
        "no joint state or no camera frame for this long in wall time: the source is reported dead on /diagnostics "
        "(ERROR) and in the log at once",
        min_value=0.1,
        max_value=60.0,
        min_reason="camera frames come at 30 Hz (33 ms apart): under three of their periods a live camera is reported "
        "dead",
    ),
    ParamSpec(
        "max_input_pixels",
        3840 * 2160,
        "camera frames with more pixels are refused from their header, before any decoding",
        read_only=True,
        min_value=64,
        max_value=2**31 - 1,
        field=True,
        to_field=int,
    ),
    ParamSpec(
        "shape_chunks",
        True,
        "shape every chunk into the safety filter's limits before publishing (policy.shaping): targets clipped into "
        "the position limits, points that would bring a link within the filter's table clearance raised straight up "
        "(shaping_table_lift), and with shaping_retime also slowed into the velocity and acceleration limits; the "
        "filter still checks every chunk. Until the robot's limits are known chunks go out as decoded (WARN)",
    ),
    ParamSpec(
        "shaping_latency_s",
        0.05,
        "shape_chunks: the filter sees a chunk this long after its stamp (inference plus transport; 0 = none allowed "
        "for)",
        min_value=0.0,
        max_value=1.0,
        min_positive=0.001,
        min_reason="inference plus transport take a millisecond at the least",
    ),
    ParamSpec(
        "shaping_table_lift",
        True,
        "shape_chunks: raise points whose links would come within the filter's table clearance (plus "
        "shaping_table_margin_m) straight up, keeping the tool's position across the table and its orientation "
        "(policy.table_lift)",
    ),
    ParamSpec(
        "shaping_table_margin_m",
        0.005,
        "shape_chunks: clearance kept above the filter's clearance_m when lifting points off the table (0 = none "
        "beyond it)",
        min_value=0.0,
        max_value=0.1,
        min_positive=0.001,
        min_reason="under 1 mm it is below the accuracy of the collision meshes and of the forward kinematics",
    ),
    ParamSpec(
        "shaping_reach",
        True,
        "shape_chunks: pull the first point within reach of the measured state (the tracking tolerance plus what the "
        "velocity limit covers by its time): one regression error on the first point is no motion to slow the chunk "
        "for",
    ),
    ParamSpec(
        "shaping_retime",
        False,
        "shape_chunks: also slow the whole chunk by one time scale into the velocity and acceleration limits (off: "
        "with the shipped model it costs held-out success, docs/policy_and_live_eval.md; the filter stretches what "
        "needs it)",
    ),
    ParamSpec(
        "robot_description_file",
        "",
        "shape_chunks: URDF whose joint limits the filter uses; empty = the robot profile's, else the "
        "/robot_description topic (transient local)",
        read_only=True,
    ),
    ROBOT_PROFILE,
    ParamSpec(
        "safety_params_file",
        "",
        "shape_chunks: the safety filter's parameter file (its margins, clearances and tracking tolerances); empty = "
        "the package's config/safety_filter.yaml",
        read_only=True,
    ),
    ParamSpec(
        "limits_file",
        "",
        "shape_chunks: the joint limits' file the filter and the controller read (scales, default accelerations, "
        "per-joint overrides); empty = the package's config/limits.yaml",
        read_only=True,
    ),
]


def session_config_from_params(p: dict, chunk_limits=None):
    """The ``SessionConfig`` these values set (``vla_ros.policy``); ``chunk_limits`` (``policy.shaping``) only
    when ``shape_chunks`` is on."""
    from vla_ros.policy.session import SessionConfig

    return build_config(SessionConfig, PARAMS, p, chunk_limits=chunk_limits if p["shape_chunks"] else None)


def shaping_limits_from_params(p: dict, urdf, joint_names, share_dir=None, base_dir=None):
    """The safety filter's limits for ``joint_names`` (``policy.shaping.ChunkLimits``): the URDF's (``urdf``:
    path, XML text or element), resolved with the joint limits' file the filter reads too (``limits_file``, else
    ``share_dir``/config/limits.yaml) and the filter's parameter file (``safety_params_file``, else
    ``share_dir``/config/safety_filter.yaml), in the order robot.launch.xml gives the filter them (its own file,
    then the limits); ``package://`` meshes resolve through that file's ``package_paths``, else the robot profile's
    (as the filter's do), relative ones against ``base_dir``. Raises ValueError (a file that cannot be read,
    limits that do not fit) saying what is wrong."""
    from pathlib import Path

    import yaml

    from vla_ros.params import safety_filter
    from vla_ros.params.limits import LIMITS_FILE
    from vla_ros.params.spec import values_from_yaml
    from vla_ros.policy.shaping import chunk_limits

    def path(name: str, default: str) -> Path:
        if p[name]:
            return Path(p[name])
        from vla_ros.launch_runner.packages import find_package_share

        return Path(share_dir or find_package_share("vla_ros")) / "config" / default

    paths = [path("safety_params_file", "safety_filter.yaml"), path("limits_file", LIMITS_FILE)]
    try:
        values = values_from_yaml(safety_filter.PARAMS, paths, "safety_filter")
        config = safety_filter.config_from_params(values)
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(
            f"cannot read the safety filter's parameters from {' and '.join(map(str, paths))}: {err}"
        ) from err
    margin = float(p["shaping_table_margin_m"]) if p["shaping_table_lift"] else None
    return chunk_limits(
        urdf,
        joint_names,
        config,
        latency_s=float(p["shaping_latency_s"]),
        reach=bool(p["shaping_reach"]),
        retime=bool(p["shaping_retime"]),
        table_margin_m=margin,
        package_paths=safety_filter.lines(values["package_paths"]) or robot_files(p).package_paths,
        base_dir=base_dir,
    )
