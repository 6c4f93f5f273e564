"""Closed-loop episodes on simulated time, in one process: messages -> policy session -> safety filter ->
controller -> sim.

The same core objects the nodes wrap, wired the way the launch graph wires them, stepped on the
simulation's clock so a run is deterministic per seed and independent of the machine's speed:

* every 100 Hz joint state and 30 Hz frame is built as the ROS message the sim node publishes and goes
  to the ``PolicySession`` the policy node runs (frames after a fixed delivery delay, like the live graph);
* the session ticks at ``policy_rate_hz`` with the node's rules (episode start, staleness, smoothing,
  horizon, finiteness); its chunk reaches the filter ``inference_latency_s`` later (a fixed, modelled
  latency, so results do not depend on this machine's load);
* the filter checks it against the joint state of that instant; what passes goes to the controller,
  which runs at 100 Hz and commands the sim's position actuators.

``vla-ros eval --live`` measures the same episodes through the launched processes instead (``live_eval``).
Success: the named cup's bottom is 5 cm above the table. Lifting another cup ends the episode as a failure.
Parameters come from the same YAML files the nodes load (``config/policy.yaml``, ``config/safety_filter.yaml``,
``config/controller.yaml``, ``config/limits.yaml``), so evaluation runs the shipped configuration. The robot is a
profile (``vla_ros.robot_profile``): the one asked for, else the one the model folder records (``vla-ros train
--robot``), else the bundled arm; the sim, the filter (URDF, SRDF, joints) and the controller are built from it,
as ``robot_profile:=`` builds the nodes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Args:
    max_episode_s: simulated seconds before an episode counts as failed.
    policy_rate_hz: policy ticks per simulated second (the node's ``rate_hz``); None = as config/policy.yaml
        sets it, and its ``tick_on_frame`` too, so the evaluation ticks as the node does.
    inference_latency_s: modelled time from a tick to its chunk reaching the filter.
    frame_delay_s: frames reach the policy this long after their stamp (rendering + transport).
    hold_after_success_s: keep running after success (for videos, and ``eval --hold``: is the cup still up?).
    chunk_smoothing_degree: the policy node's polynomial fit of each chunk; None = as config/policy.yaml sets it.
    shape_chunks: the policy node's ``shape_chunks`` (chunks shaped into the filter's limits); None = as
        config/policy.yaml sets it.
    temporal_ensemble_s: the policy node's ``temporal_ensemble_s``; None = as config/policy.yaml sets it.
    policy_instruction: the policy node's ``policy_instruction`` (as_given or grounded); None = as
        config/policy.yaml sets it.
    refused_episode_s: an episode whose instruction the policy refuses (``policy.grounding``) ends this many
        simulated seconds in, time enough to see that the arm holds (one it accepts runs to the end).
    """

    max_episode_s: float = 15.0
    policy_rate_hz: float | None = None
    inference_latency_s: float = 0.03
    frame_delay_s: float = 0.02
    hold_after_success_s: float = 0.0
    chunk_smoothing_degree: int | None = None
    shape_chunks: bool | None = None
    temporal_ensemble_s: float | None = None
    image_width: int = 320
    image_height: int = 240
    refused_episode_s: float = 3.0
    policy_instruction: str | None = None


@dataclasses.dataclass
class EpisodeResult:
    seed: int
    color: str
    instruction: str
    success: bool
    time_to_success_s: float | None
    lifted: str | None
    verdicts: dict
    chunks: int
    min_target_distance_m: float
    initial_target_distance_m: float
    findings: dict = dataclasses.field(default_factory=dict)  # the filter's finding codes on this episode's chunks
    # every grasp the arm was commanded into (the gripper command falling through half open): simulated time
    # and where the tool centre point was against the named cup's axis, along the arm's reach (from the base
    # out) and across it, metres; how fast the hand was moving then (over the last 0.1 s, m/s, the vertical
    # signed: negative is still coming down); and when the hand had risen 2 cm above where it closed
    # (``lift_after_s`` after the close, None if it never did before the gripper opened again) with the
    # measured finger opening then (``fingers_at_lift_m``: still closing on air or squeezing the cup)
    closes: list = dataclasses.field(default_factory=list)
    frames: list | None = None  # camera frames (RGB) when recording
    commanded: list | None = None
    measured: list | None = None
    # the instruction check's decision (``PolicySession.instruction_status``): refused, the policy gives no chunk
    refused: bool = False
    instruction_status: dict = dataclasses.field(default_factory=dict)
    # the largest distance of the tool centre point from where it started, sampled at 50 Hz (m)
    max_tcp_displacement_m: float = 0.0


def reach_axes(cup_m) -> tuple[np.ndarray, np.ndarray]:
    """Unit xy vectors along the arm's reach (the horizontal line from the base out through the cup) and
    across it (to the left seen from the base); +x and +y for a cup straight above the base."""
    xy = np.asarray(cup_m, float)[:2]
    norm = float(np.linalg.norm(xy))
    along = xy / norm if norm > 1e-9 else np.array([1.0, 0.0])
    return along, np.array([-along[1], along[0]])


def grasp_offset(t_s: float, tcp_m, cup_m) -> dict:
    """Where a grasp closes against the cup: the tool centre point minus the cup's axis, split along the
    arm's reach and across it (``reach_axes``), and in world x, y."""
    d = np.asarray(tcp_m, float)[:2] - np.asarray(cup_m, float)[:2]
    along, across = reach_axes(cup_m)
    return {
        "t_s": round(float(t_s), 3),
        "along_reach_m": round(float(d @ along), 4),
        "across_reach_m": round(float(d @ across), 4),
        "x_m": round(float(d[0]), 4),
        "y_m": round(float(d[1]), 4),
    }


LIFT_CHECK_M = 0.02  # a grasp counts as lifted once the hand is this far above where it closed


def hand_speed(history: list[tuple[float, np.ndarray]]) -> dict:
    """The tool centre point's mean velocity over ``history`` ((t_s, xyz) oldest first): horizontal speed and
    vertical velocity (m/s; negative is downwards), zero for a single sample."""
    (t0, p0), (t1, p1) = history[0], history[-1]
    if t1 <= t0:
        return {"hand_speed_xy_m_s": 0.0, "hand_speed_z_m_s": 0.0}
    v = (np.asarray(p1) - np.asarray(p0)) / (t1 - t0)
    return {"hand_speed_xy_m_s": round(float(np.hypot(v[0], v[1])), 4), "hand_speed_z_m_s": round(float(v[2]), 4)}


class ClosedLoop:
    """Builds the cores once; ``run_episode(seed, instruction, color)`` runs one episode.

    ``robot``: a robot profile's name or file (None: the model's recorded robot, else the bundled arm); raises
    ProfileError (a ValueError) where it does not load or does not command the model's joints."""

    def __init__(
        self,
        model_dir: str | Path,
        backend: str = "torch",
        device: str = "cpu",
        config: EvalConfig | None = None,
        share_dir: Path | None = None,
        threads: int | None = None,
        robot: str | None = None,
    ) -> None:
        from vla_ros.control import ChunkExecutor
        from vla_ros.launch_runner.packages import find_package_share
        from vla_ros.params import controller, policy, safety_filter
        from vla_ros.params.robot import robot_files
        from vla_ros.params.spec import values_from_yaml
        from vla_ros.policy import PolicySession
        from vla_ros.robot_profile import profile_for_model
        from vla_ros.safety import SafetyFilter
        from vla_ros.safety.robot import load_robot_files
        from vla_ros.sim import ArmSim, SimConfig

        self.config = config or EvalConfig()
        share = Path(share_dir) if share_dir else find_package_share("vla_ros")
        profile = profile_for_model(model_dir, robot)
        self.sim = ArmSim(
            SimConfig(image_width=self.config.image_width, image_height=self.config.image_height), profile=profile
        )
        # every node's robot_profile parameter, as robot.launch.xml robot_profile:= sets it
        robot_param = {"robot_profile": str(profile.source)}
        policy_p = values_from_yaml(policy.PARAMS, share / "config" / "policy.yaml", "policy") | robot_param
        if self.config.chunk_smoothing_degree is not None:
            policy_p["chunk_smoothing_degree"] = self.config.chunk_smoothing_degree
        if self.config.shape_chunks is not None:
            policy_p["shape_chunks"] = self.config.shape_chunks
        if self.config.temporal_ensemble_s is not None:
            policy_p["temporal_ensemble_s"] = self.config.temporal_ensemble_s
        if self.config.policy_rate_hz is not None:
            policy_p["rate_hz"] = self.config.policy_rate_hz
        if self.config.policy_instruction is not None:
            policy_p["policy_instruction"] = self.config.policy_instruction
        self.rate_hz, self.tick_on_frame = float(policy_p["rate_hz"]), bool(policy_p["tick_on_frame"])
        if not (self.rate_hz > 0 or self.tick_on_frame):
            raise ValueError(f"the policy never ticks: rate_hz={self.rate_hz} and tick_on_frame is false")
        limits_yaml = share / "config" / "limits.yaml"  # the joint limits the filter, controller and policy share
        safety_p = values_from_yaml(
            safety_filter.PARAMS, [share / "config" / "safety_filter.yaml", limits_yaml], "safety_filter"
        )
        safety_p |= robot_param
        safety_config = safety_filter.config_from_params(safety_p)
        policy_p["safety_params_file"] = str(share / "config" / "safety_filter.yaml")  # the filter it runs with here
        policy_p["limits_file"] = str(limits_yaml)
        limits = None
        if policy_p["shape_chunks"]:
            from vla_ros.model.io import load_config

            names = load_config(model_dir).joint_names
            limits = policy.shaping_limits_from_params(
                policy_p, self.sim.urdf_xml, names, base_dir=self.sim.urdf_path.parent
            )
        self.session = PolicySession.from_pretrained(
            model_dir,
            backend=backend,
            device=device,
            threads=threads,
            config=policy.session_config_from_params(policy_p, limits),
        )
        files = robot_files(safety_p)  # the profile's URDF, SRDF and package paths, as the filter node loads them
        self.safety = SafetyFilter(load_robot_files(files.urdf, files.srdf or None, files.package_paths), safety_config)
        control_p = (
            values_from_yaml(controller.PARAMS, [share / "config" / "controller.yaml", limits_yaml], "controller")
            | robot_param
        )
        self.controller_config = controller.config_from_params(control_p)
        self._executor_cls = ChunkExecutor
        names = list(self.sim.command_joint_names)
        self._to_sim = np.array([list(self.controller_config.joint_names).index(n) for n in names])
        # a close: the gripper command falling through half open (the grasp records and the aim tool use it)
        finger = self.sim.profile.gripper_joints[0]
        self.gripper_index = names.index(finger) if finger in names else None
        self.half_open = (
            None
            if self.gripper_index is None
            else 0.5 * (self.sim.limits.lower[self.gripper_index] + self.sim.limits.upper[self.gripper_index])
        )

    def close(self) -> None:
        self.sim.close()

    def run_episode(self, seed: int, instruction: str, color: str, record: bool = False, hook=None) -> EpisodeResult:
        """One closed-loop episode. ``hook`` (optional) sees what the robot graph carries and may take the arm
        over: ``start(sim, instruction, color)``, ``joint_state(stamp)``, ``frame(rgb, stamp, camera)``, ``status()``,
        and ``execute(q_policy) -> (q, takeover_ended)`` every control period, where ``q_policy`` is the
        controller's command (or None) and ``q`` what the arm gets; when a takeover ends, the controller
        restarts from the measured joints (``vla-ros collect --policy`` records expert-labelled rollouts)."""
        from vla_ros.chunks import ActionChunk
        from vla_ros.ros.sim_msgs import sensor_messages
        from vla_ros.safety import JointStateSample

        cfg, sim, session = self.config, self.sim, self.session
        sim.reset(seed)  # simulated time restarts at 0
        if hook is not None:
            hook.start(sim, instruction, color)
        session.reset()
        refused = session.set_instruction(instruction, 0) is None and session.instruction_refused
        end_s = min(cfg.max_episode_s, cfg.refused_episode_s) if refused else cfg.max_episode_s
        tcp0 = sim.tcp_position().copy()
        max_displacement = 0.0
        controller = self._executor_cls(self.controller_config)
        sim_names = list(sim.joint_names)
        ctrl_from_sim = np.array([sim_names.index(n) for n in self.controller_config.joint_names])
        steps_per_tick = round(sim.config.physics_rate_hz / self.rate_hz) if self.rate_hz > 0 else 0
        latency_ns = int(cfg.inference_latency_s * 1e9)
        frame_delay_ns = int(cfg.frame_delay_s * 1e9)
        pending_frames: list[tuple[int, object]] = []
        pending_chunks: list[tuple[int, ActionChunk]] = []
        verdicts: Counter = Counter()
        findings: Counter = Counter()
        chunks = 0
        success_t = None
        lifted = None
        period_s = 1.0 / sim.config.joint_state_rate_hz
        cup0 = sim.cup_positions()[color]
        initial_d = float(np.linalg.norm(sim.tcp_position() - cup0))
        min_d = initial_d
        frames, commanded, measured = ([], [], []) if record else (None, None, None)
        last_state = None
        closes, gripper_was_open = [], True
        tcp_history: list[tuple[float, np.ndarray]] = []  # the last 0.1 s of the tool's path, for its speed at a close
        lift_from_z: float | None = None  # the height of the latest close, until the hand has risen from it
        while sim.time_s < end_s:
            now = sim.time_ns
            js, camera_frames = sensor_messages(sim, session.cameras)
            if js is not None:
                session.add_message("sensor_msgs/msg/JointState", js, now, "/joint_states")
                q_all = np.asarray(js.position)
                controller.set_measured(q_all[ctrl_from_sim], now, now)
                last_state = JointStateSample(tuple(js.name), q_all, now)
                if hook is not None:
                    hook.joint_state(js.header.stamp)
            for camera, rgb, image in camera_frames:
                if hook is not None:
                    hook.frame(rgb, image.header.stamp, camera)
                pending_frames.append((now + frame_delay_ns, session.topic_of(camera), image))
                if record and camera == session.cameras[0]:
                    frames.append(rgb.copy())  # the sim renders every frame into one reused buffer
            frame_in = False
            while pending_frames and pending_frames[0][0] <= now:
                _, topic, msg = pending_frames.pop(0)
                session.add_message("sensor_msgs/msg/Image", msg, now, topic)
                frame_in = True
            if (steps_per_tick and sim.step_count % steps_per_tick == 0) or (self.tick_on_frame and frame_in):
                out = session.tick(now).chunk
                if out is not None:
                    pending_chunks.append((now + latency_ns, out))
            while pending_chunks and pending_chunks[0][0] <= now:
                _, chunk = pending_chunks.pop(0)
                safe, report = self.safety.filter(chunk, last_state, now)
                verdicts[report.verdict] += 1
                findings.update({f.code for f in report.findings})
                chunks += 1
                if safe is not None:
                    controller.submit_chunk(safe)
            if sim.is_joint_state_step():
                q_cmd = controller.update(now, period_s)
                q_cmd = None if q_cmd is None else np.asarray(q_cmd)[self._to_sim]
                if hook is not None:
                    q_cmd, handback = hook.execute(q_cmd)
                    if handback:  # the controller's own plan is stale: start over from the measured joints
                        controller = self._executor_cls(self.controller_config)
                        controller.set_measured(q_all[ctrl_from_sim], now, now)
                if q_cmd is not None:
                    if self.gripper_index is not None:
                        tcp = sim.tcp_position()
                        tcp_history = [h for h in tcp_history if h[0] >= sim.time_s - 0.1 - 1e-9] + [(sim.time_s, tcp)]
                        is_open = q_cmd[self.gripper_index] >= self.half_open
                        if gripper_was_open and not is_open:
                            closes.append(
                                grasp_offset(sim.time_s, tcp, sim.cup_positions()[color])
                                | hand_speed(tcp_history)
                                | {"lift_after_s": None, "fingers_at_lift_m": None}
                            )
                            lift_from_z = float(tcp[2])
                        elif not is_open and lift_from_z is not None and tcp[2] > lift_from_z + LIFT_CHECK_M:
                            closes[-1]["lift_after_s"] = round(sim.time_s - closes[-1]["t_s"], 3)
                            closes[-1]["fingers_at_lift_m"] = round(
                                float(sim.command_joint_positions()[self.gripper_index]), 4
                            )
                            lift_from_z = None
                        if is_open:
                            lift_from_z = None  # opened again before any lift
                        gripper_was_open = is_open
                    sim.command_positions(None, q_cmd)
                    if record:
                        commanded.append((sim.time_s, np.asarray(q_cmd).copy()))
                        measured.append((sim.time_s, sim.command_joint_positions().copy()))
            if hook is not None and sim.step_count % (sim.config.physics_rate_hz // 10) == 0:
                hook.status()
            sim.step()
            if sim.step_count % max(1, sim.config.physics_rate_hz // 50) == 0:
                max_displacement = max(max_displacement, float(np.linalg.norm(sim.tcp_position() - tcp0)))
            if sim.step_count % 60 == 0:
                min_d = min(min_d, float(np.linalg.norm(sim.tcp_position() - sim.cup_positions()[color])))
                lifted = sim.lifted_cup()
                if lifted is not None and success_t is None:
                    if lifted != color:
                        break  # the wrong cup: a failure
                    success_t = sim.time_s
                if success_t is not None and sim.time_s >= success_t + cfg.hold_after_success_s:
                    break
        return EpisodeResult(
            seed=seed,
            color=color,
            instruction=instruction,
            success=success_t is not None,
            time_to_success_s=success_t,
            lifted=lifted,
            verdicts=dict(verdicts),
            chunks=chunks,
            min_target_distance_m=min_d,
            initial_target_distance_m=initial_d,
            findings=dict(findings),
            closes=closes,
            frames=frames,
            commanded=commanded,
            measured=measured,
            refused=refused,
            instruction_status=dict(session.instruction_status),
            max_tcp_displacement_m=round(max_displacement, 4),
        )
