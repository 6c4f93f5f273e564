"""``vla-ros collect``: demonstrations from the scripted expert, recorded as MCAP episodes.

Each episode runs the MuJoCo core on simulated time with the closed-loop expert picking the cup named
by a randomly phrased instruction, and writes what the robot graph would carry: ``/joint_states``
(100 Hz), ``/camera/image_raw`` and ``/wrist_camera/image_raw`` + ``camera_info`` (30 Hz), ``/vla/instruction``, the
expert's commands
on ``/forward_position_controller/commands`` (the training targets) and ``/vla/episode_status``. Messages
are built by the same functions the sim node uses and serialized to CDR; each gets a log time of its stamp
plus a delivery delay like the live graph's (frames 10-40 ms, joint states 1-3 ms), written in that order,
so replay sees frames arrive after newer joint states just as the node does.

Some episodes start from a perturbed arm pose, some have a push (a smooth offset added to the executed
commands for a moment) and some have a freeze (the executed command held for a moment, often right at the
start) while the label stays the expert's clean command: the policy learns to come back to the path and
to set off from rest. Without freezes every demonstration is already moving a few tens of milliseconds in,
and a policy that reads joint velocities learns to continue whatever motion it sees: from rest, nothing.
Training seeds and evaluation seeds are disjoint ranges (``vla_ros.sim.tasks``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

from vla_ros import cameras

EXAMPLE = "example: vla-ros collect --episodes 20 --out runs/demos   (another arm: --robot fr3)"
RECORDED_CAMERAS = (cameras.FRONT, cameras.WRIST)  # every camera the sim has: a model picks what it reads


@dataclasses.dataclass(frozen=True)
class CollectConfig:
    """Args:
    max_episode_s: give up after this much simulated time.
    hold_after_lift_s: keep recording this long after the cup is lifted.
    arm_noise_rad: start-pose perturbation per arm joint (uniform).
    push_probability: share of episodes with a push.
    push_rad: largest push offset per joint.
    freeze_probability: share of episodes where the executed command is held still for a while (at the
        start in half of them, else mid-way) while the labels keep saying where to go.
    near_miss_probability: share of episodes that start with a near miss (``NearMiss``): an unlabelled
        approach to a point beside the cup, then the expert takes over, labelled, from there.
    near_miss_m: (min, max) distance of the missed point from the cup's centre.
    grasp_roll_rad: the expert's wrist roll (``ExpertConfig.wrist_roll_rad``): how its fingers face the cup.
    grasp_pause_s: the expert keeps still this much longer on either side of closing the fingers: at grasp
        height before they start to close (``ExpertConfig.settle_s``) and before it lifts (added to
        ``ExpertConfig.close_s``).
    still_hold: the expert lifts straight up and holds there (``ExpertConfig.still_hold``).
    """

    max_episode_s: float = 12.0
    hold_after_lift_s: float = 1.0
    arm_noise_rad: float = 0.15
    push_probability: float = 0.4
    push_rad: float = 0.12
    freeze_probability: float = 0.6
    near_miss_probability: float = 0.0
    near_miss_m: tuple[float, float] = (0.02, 0.05)
    grasp_roll_rad: float = 0.0
    grasp_pause_s: float = 0.0
    still_hold: bool = False
    image_width: int = 320
    image_height: int = 240


def make_expert(config: CollectConfig | TakeoverConfig, profile=None):
    """The scripted expert for the robot ``profile`` (None: the bundled arm) with the grasp a collection asks for
    (``grasp_roll_rad``, ``grasp_pause_s``)."""
    from vla_ros.sim.expert import ExpertConfig, PickExpert

    return PickExpert(
        ExpertConfig(
            wrist_roll_rad=config.grasp_roll_rad,
            settle_s=config.grasp_pause_s,
            close_s=ExpertConfig.close_s + config.grasp_pause_s,
            still_hold=config.still_hold,
        ),
        profile=profile,
    )


def _push_profile(rng: np.random.Generator, config: CollectConfig, n_arm: int = 6, n_gripper: int = 1):
    """A smooth bump (raised cosine) of the arm joints, of random direction, start and length, or None."""
    if rng.random() >= config.push_probability:
        return None
    start, length = rng.uniform(0.5, 2.5), rng.uniform(0.3, 0.8)
    offset = np.append(rng.uniform(-config.push_rad, config.push_rad, n_arm), np.zeros(n_gripper))

    def at(t_s: float) -> np.ndarray:
        s = (t_s - start) / length
        return offset * (0.5 - 0.5 * np.cos(2 * np.pi * s)) if 0.0 <= s <= 1.0 else np.zeros(offset.size)

    return at


def _freeze_window(rng: np.random.Generator, config: CollectConfig) -> tuple[float, float] | None:
    """(start_s, end_s) of a freeze, or None."""
    if rng.random() >= config.freeze_probability:
        return None
    start = 0.0 if rng.random() < 0.5 else rng.uniform(0.3, 2.0)
    return start, start + rng.uniform(0.2, 0.8)


class NearMiss:
    """The first part of a near-miss episode: a copy of the expert aims at a point beside the cup.

    Demonstrations only ever show the gripper arriving where the cup is, so a policy never learns what to do
    with the gripper at grasp height two or three centimetres off, which is where its failures end. Here the
    decoy goes down beside the cup (in some episodes shutting on nothing; it stops as soon as a finger has
    moved the cup half a centimetre: a pad landing on the rim tips a cup within a few control periods) while
    nothing is recorded as a command; then the expert takes over from that state (``PickExpert.take_over``:
    back above the cup, down, grasp) and its commands are the labels.
    Drawn from its own random stream, so the other episodes of a seed range stay exactly as they were
    without near misses.
    """

    def __init__(self, seed: int, config: CollectConfig, profile=None) -> None:
        from vla_ros.sim.scripted import GRASP_TCP_Z_M

        rng = np.random.default_rng([seed, 17])
        self.drawn = self.active = bool(rng.random() < config.near_miss_probability)
        angle, radius = rng.uniform(0, 2 * np.pi), rng.uniform(*config.near_miss_m)
        self.offset_m = np.array([radius * np.cos(angle), radius * np.sin(angle), 0.0])
        # take over on the way down (fingers still above the cup) or, in a third, after shutting on nothing
        self.shut_s = float(rng.uniform(0.2, 0.9)) if rng.random() < 1 / 3 else None
        self.decoy = make_expert(config, profile)
        self.takeover_z_m = self.decoy.table_z_m + GRASP_TCP_Z_M + float(rng.uniform(0.005, 0.08))
        self.cup_start_m: np.ndarray | None = None
        self.shutting_since_s: float | None = None

    def command(self, sim, cup_m: np.ndarray) -> np.ndarray | None:
        """The decoy's command while it drives, None once the expert should take over."""
        d = self.decoy
        if self.cup_start_m is None:
            self.cup_start_m = np.array(cup_m, float)
        if np.linalg.norm(cup_m - self.cup_start_m) > 0.005:  # a finger is on the cup: take over before it tips
            return None
        if d.phase == "close":
            self.shutting_since_s = sim.time_s if self.shutting_since_s is None else self.shutting_since_s
            if self.shut_s is None or sim.time_s - self.shutting_since_s >= self.shut_s:
                return None
        if self.shut_s is None and d.phase == "descend" and sim.tcp_position()[2] <= self.takeover_z_m:
            return None
        if d.phase in ("lift", "hold"):
            return None
        return d.command(sim.time_s, sim.tcp_position(), cup_m + self.offset_m, sim.joint_positions())


class EpisodeRecorder:
    """The messages of one episode as the robot graph carries them, written to MCAP at the end.

    Messages are built by the sim node's own functions and serialized to CDR; each gets a log time of the
    sim time plus a delivery delay, and the file is written in log-time order (replay sees frames arrive
    after newer joint states, as the node does). Shared by expert demonstrations and policy rollouts.
    """

    def __init__(self, sim, rng: np.random.Generator) -> None:
        self.sim, self.rng = sim, rng
        self.pending: list[tuple[int, int, str, str, bytes]] = []  # (log_ns, order, topic, type, cdr)

    def _emit(self, delay_s: float, topic: str, type_name: str, msg) -> None:
        from rclpy.serialization import serialize_message

        self.pending.append(
            (self.sim.time_ns + int(delay_s * 1e9), len(self.pending), topic, type_name, serialize_message(msg))
        )

    def instruction(self, text: str) -> None:
        from std_msgs.msg import String

        self._emit(0.001, "/vla/instruction", "std_msgs/msg/String", String(data=text))

    def joint_state(self, stamp) -> None:
        from vla_ros.ros.sim_msgs import joint_state_msg

        self._emit(
            self.rng.uniform(0.001, 0.003),
            "/joint_states",
            "sensor_msgs/msg/JointState",
            joint_state_msg(self.sim, stamp),
        )

    def command(self, q: np.ndarray) -> None:
        """The training target: what the expert commands now."""
        from std_msgs.msg import Float64MultiArray

        self._emit(
            0.0,
            "/forward_position_controller/commands",
            "std_msgs/msg/Float64MultiArray",
            Float64MultiArray(data=np.asarray(q, float).tolist()),
        )

    def frame(self, rgb: np.ndarray, stamp, camera: str = cameras.FRONT) -> None:
        from vla_ros.ros.sim_msgs import camera_info_msg, image_msg

        delay = self.rng.uniform(0.010, 0.040)  # each camera's driver has its own delay
        frame_id = cameras.optical_frame(camera)
        self._emit(delay, cameras.image_topic(camera), "sensor_msgs/msg/Image", image_msg(rgb, stamp, frame_id))
        self._emit(
            delay,
            cameras.info_topic(camera),
            "sensor_msgs/msg/CameraInfo",
            camera_info_msg(self.sim.camera_intrinsics(camera), stamp, frame_id),
        )

    def status(self) -> None:
        from std_msgs.msg import String

        self._emit(0.0005, "/vla/episode_status", "std_msgs/msg/String", String(data=json.dumps(self.sim.status())))

    def write(self, out_path: Path, summary: dict, recorder: str = "collect") -> None:
        from vla_ros import __version__
        from vla_ros.data.mcap_io import McapEpisodeWriter

        self.pending.sort()
        metadata = {"recorder": f"vla_ros {__version__} {recorder}", **{k: str(v) for k, v in summary.items()}}
        with McapEpisodeWriter(out_path, metadata=metadata) as writer:
            for log_ns, _order, topic, type_name, cdr in self.pending:
                writer.write(topic, type_name, cdr, log_ns)


def record_episode(sim, seed: int, out_path: Path, config: CollectConfig, templates=None) -> dict:
    """Run one expert episode on ``sim`` and write it to ``out_path``; returns its summary."""
    from vla_ros.ros.time import time_msg_from_ns
    from vla_ros.sim.tasks import TRAIN_TEMPLATES, episode_task

    color, instruction = episode_task(seed, templates or TRAIN_TEMPLATES)
    rng = np.random.default_rng([seed, 11])
    sim.reset(seed, arm_noise_rad=config.arm_noise_rad)
    push = _push_profile(rng, config, sim.n_arm, len(sim.command_joint_names) - sim.n_arm)
    freeze = _freeze_window(rng, config)
    near_miss = NearMiss(seed, config, sim.profile)
    if near_miss.active:
        push = freeze = None  # one thing to recover from at a time
    held: np.ndarray | None = None
    last = previous = np.asarray(sim.command_joint_positions(), float)
    dt_s = 1.0 / sim.config.joint_state_rate_hz
    expert = make_expert(config, sim.profile)
    rec = EpisodeRecorder(sim, rng)
    rec.instruction(instruction)
    lifted_at = None
    while sim.time_s < config.max_episode_s:
        stamp = time_msg_from_ns(sim.time_ns)
        if sim.is_joint_state_step():
            if sim.time_ns > 0:  # a stamp of 0 reads as unstamped (joint_state_check): every node would refuse it
                rec.joint_state(stamp)
            q_cmd = near_miss.command(sim, sim.cup_positions()[color]) if near_miss.active else None
            if q_cmd is None:
                if near_miss.active:  # the decoy is done: the expert goes on from its last command, labelled
                    near_miss.active = False
                    expert.take_over(
                        sim.tcp_position(),
                        sim.cup_positions()[color],
                        sim.joint_positions(),
                        last,
                        (last - previous) / dt_s,
                    )
                q_cmd = expert.command(
                    sim.time_s, sim.tcp_position(), sim.cup_positions()[color], sim.joint_positions()
                )
                rec.command(q_cmd)
            previous, last = last, np.asarray(q_cmd, float)
            executed = q_cmd + (push(sim.time_s) if push else 0.0)
            if freeze is not None and freeze[0] <= sim.time_s < freeze[1]:
                held = np.asarray(sim.command_joint_positions(), float) if held is None else held
                executed = held  # the arm waits; the label still says where to go
            sim.command_positions(None, np.clip(executed, sim.limits.lower, sim.limits.upper))
        if sim.is_frame_step():
            for camera in RECORDED_CAMERAS:
                if camera in sim.camera_ids:  # a profile may have no hand camera
                    rec.frame(sim.render(camera), stamp, camera)
        if sim.step_count % (sim.config.physics_rate_hz // 10) == 0:
            rec.status()
        sim.step()
        if lifted_at is None and sim.lifted_cup() == color:
            lifted_at = sim.time_s
        if lifted_at is not None and sim.time_s >= lifted_at + config.hold_after_lift_s:
            break
    rec.status()
    summary = {
        "seed": seed,
        "robot": sim.profile.name,
        "color": color,
        "instruction": instruction,
        "success": lifted_at is not None,
        "time_to_lift_s": lifted_at,
        "duration_s": round(sim.time_s, 3),
        "pushed": push is not None,
        "frozen": freeze is not None,
        "near_miss_m": round(float(np.linalg.norm(near_miss.offset_m)), 4) if near_miss.drawn else None,
        "expert_restarts": expert.restarts,
        "wrong_cup": sim.lifted_cup() not in (None, color),
    }
    rec.write(out_path, summary)
    return summary


@dataclasses.dataclass(frozen=True)
class TakeoverConfig:
    """Policy rollouts with expert takeovers (``vla-ros collect --policy``).

    Args:
        policy_s / expert_s: (min, max) length of the alternating segments, drawn per segment; the policy
            drives first.
        near_cup_m: above 0, the grasp round instead: the policy drives until its tool comes down within
            this horizontal distance of the named cup, below a height drawn per episode from ``takeover_z_m``,
            or until it starts closing the gripper; then the expert finishes the grasp and the lift from
            there (no hand-back), so the labels are the last centimetres from where the policy brought the hand.
        takeover_z_m: (min, max) of that drawn height (m, tool height above the table).
        max_episode_s / hold_after_lift_s / grasp_roll_rad / grasp_pause_s / still_hold: as in CollectConfig.
    """

    policy_s: tuple[float, float] = (0.6, 2.0)
    expert_s: tuple[float, float] = (1.0, 2.0)
    near_cup_m: float = 0.0
    takeover_z_m: tuple[float, float] = (0.06, 0.15)  # from 1 cm over grasp height to 3 cm under the approach's
    max_episode_s: float = 12.0
    hold_after_lift_s: float = 1.0
    grasp_roll_rad: float = 0.0
    grasp_pause_s: float = 0.0
    still_hold: bool = False


class ExpertTakeover:
    """A ClosedLoop hook: the policy drives, the expert takes over now and then, everything is recorded.

    This is the intervention flavour of DAgger: the learner visits the states its own mistakes lead to,
    and the expert shows the way back from there. Only the expert's segments carry training targets (its
    commands are published only while it drives, and the dataset leaves points without a command out of
    the loss): what the policy did is context, never a label.
    """

    def __init__(self, seed: int, config: TakeoverConfig = TakeoverConfig()) -> None:
        self.config = config
        self.rng = np.random.default_rng([seed, 13])
        self.expert_segments = 0

    def start(self, sim, instruction: str, color: str) -> None:
        self.sim, self.color = sim, color
        self.expert = make_expert(self.config, sim.profile)
        self.rec = EpisodeRecorder(sim, self.rng)
        self.rec.instruction(instruction)
        self.expert_driving = False
        self.switch_at_s = float(self.rng.uniform(*self.config.policy_s))
        self.takeover_z_m = float(self.rng.uniform(*self.config.takeover_z_m))
        self.takeover = None  # grasp round: where the expert took over (tool minus cup, m)
        self.takeover_closing = False  # ... because the policy started closing the fingers before it was near
        self.last = self.prev = np.asarray(sim.command_joint_positions(), float)

    def joint_state(self, stamp) -> None:
        self.rec.joint_state(stamp)

    def frame(self, rgb, stamp, camera: str = cameras.FRONT) -> None:
        self.rec.frame(rgb, stamp, camera)

    def status(self) -> None:
        self.rec.status()

    def _near_cup(self, q_policy) -> bool:
        tcp, cup = self.sim.tcp_position(), self.sim.cup_positions()[self.color]
        closing = q_policy is not None and self.expert.closing_share(q_policy[self.sim.n_arm]) > 0.5
        near = np.linalg.norm(tcp[:2] - cup[:2]) < self.config.near_cup_m and tcp[2] < self.takeover_z_m
        if near or closing:
            self.takeover, self.takeover_closing = (tcp - cup).round(4).tolist(), bool(closing and not near)
        return near or closing

    def _take_over(self, resume_descent: bool = False) -> None:
        """The expert goes on from the arm's last command, moving as the last two commands did."""
        sim = self.sim
        dt = 1.0 / sim.config.joint_state_rate_hz
        self.expert.take_over(
            sim.tcp_position(),
            sim.cup_positions()[self.color],
            sim.joint_positions(),
            self.last,
            (self.last - self.prev) / dt,
            resume_descent=resume_descent,
        )

    def execute(self, q_policy):
        sim, handback = self.sim, False
        if self.config.near_cup_m > 0:
            if not self.expert_driving and self._near_cup(q_policy):
                self.expert_driving, self.expert_segments = True, 1
                self._take_over(resume_descent=True)
        elif sim.time_s >= self.switch_at_s:
            self.expert_driving = not self.expert_driving
            handback = not self.expert_driving
            self.switch_at_s = sim.time_s + float(
                self.rng.uniform(*(self.config.expert_s if self.expert_driving else self.config.policy_s))
            )
            if self.expert_driving:
                self.expert_segments += 1
                self._take_over()
        if self.expert_driving:
            q = self.expert.command(
                sim.time_s, sim.tcp_position(), sim.cup_positions()[self.color], sim.joint_positions()
            )
            self.rec.command(q)
        else:
            q = q_policy
        if q is not None:
            self.prev, self.last = self.last, np.asarray(q, float)
        else:
            self.prev = self.last  # the arm holds its last command
        return q, handback


def collect_rollouts(
    model: str,
    seeds: range,
    out: Path,
    config: TakeoverConfig = TakeoverConfig(),
    progress: bool = True,
    robot: str | None = None,
) -> list[dict]:
    """Expert-labelled policy rollouts on training seeds and phrasings (see ExpertTakeover). ``robot``: a robot
    profile's name or file (None: the one the model folder records, else the bundled arm)."""
    from tqdm import tqdm

    from vla_ros.evaluation.closed_loop import ClosedLoop, EvalConfig
    from vla_ros.sim.tasks import TRAIN_TEMPLATES, episode_task

    # one inference thread: collectors run one per core, and ONNX Runtime's spinning workers would fight
    loop = ClosedLoop(
        model,
        config=EvalConfig(max_episode_s=config.max_episode_s, hold_after_success_s=config.hold_after_lift_s),
        threads=1,
        robot=robot,
    )
    summaries = []
    bar = tqdm(seeds, desc="rollouts", unit="ep", disable=not progress)
    for seed in bar:
        color, instruction = episode_task(seed, TRAIN_TEMPLATES)
        hook = ExpertTakeover(seed, config)
        r = loop.run_episode(seed, instruction, color, hook=hook)
        summary = {
            "seed": seed,
            "color": color,
            "instruction": instruction,
            "success": r.success,
            "time_to_lift_s": r.time_to_success_s,
            "expert_segments": hook.expert_segments,
            "wrong_cup": r.lifted not in (None, color),
            "policy": str(model),
            "robot": loop.sim.profile.name,
            "takeover_offset_m": hook.takeover,
            "takeover_closing": hook.takeover_closing,
        }
        hook.rec.write(out / f"rollout_{seed:07d}.mcap", summary, recorder="collect --policy")
        summaries.append(summary)
        bar.set_postfix(success=f"{np.mean([x['success'] for x in summaries]):.0%}")
    loop.close()
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vla-ros collect", description=__doc__.splitlines()[0], epilog=EXAMPLE)
    parser.add_argument("--episodes", type=int, default=200, help="number of episodes (default 200)")
    parser.add_argument("--out", default="", help="output folder (default runs/demos-<date>)")
    parser.add_argument(
        "--robot",
        default="",
        metavar="PROFILE",
        help="robot profile: a name (fr3) or a YAML file (default: the bundled arm; with --policy, the robot the model "
        "folder records); docs/your_robot.md",
    )
    parser.add_argument("--seed-start", type=int, default=None, help="first seed (default: the training range start)")
    parser.add_argument("--keep-failures", action="store_true", help="also keep episodes where the expert failed")
    parser.add_argument(
        "--near-miss",
        type=float,
        default=0.0,
        metavar="P",
        help="share of expert episodes that start with an unlabelled near miss beside the cup (default 0)",
    )
    parser.add_argument(
        "--policy", default="", help="model folder: record its rollouts with expert takeovers instead (DAgger)"
    )
    parser.add_argument(
        "--takeover-near-cup",
        type=float,
        default=0.0,
        metavar="M",
        help="with --policy: the expert takes over once the policy's tool comes down within M metres of the named cup "
        "(or it starts closing) and finishes the grasp (default 0: alternating segments)",
    )
    parser.add_argument(
        "--grasp-roll",
        type=float,
        default=0.0,
        metavar="RAD",
        help="the expert's wrist roll, relative to the arm's pan: 0 closes the fingers across the reach, 1.5708 along "
        "it (default 0)",
    )
    parser.add_argument(
        "--hold-after-lift",
        type=float,
        default=CollectConfig.hold_after_lift_s,
        metavar="S",
        help="keep recording S seconds after the cup is lifted, the expert holding it up "
        f"(default {CollectConfig.hold_after_lift_s})",
    )
    parser.add_argument(
        "--still-hold",
        action="store_true",
        help="the expert lifts straight up from where the fingers closed and holds there (default: its lift and hold "
        "aim at the held cup, and the hand creeps after a cup held off-centre)",
    )
    parser.add_argument(
        "--grasp-pause",
        type=float,
        default=0.0,
        metavar="S",
        help="the expert keeps still S seconds longer before closing the fingers and before lifting (default 0)",
    )
    args = parser.parse_args(argv)
    if not 0.0 <= args.near_miss <= 1.0 or (args.policy and args.near_miss):
        print(
            f"--near-miss must be within [0, 1] and is for expert episodes (not --policy), got {args.near_miss}",
            file=sys.stderr,
        )
        return 2
    if not 0.0 <= args.takeover_near_cup <= 0.2 or (args.takeover_near_cup and not args.policy):
        print(
            f"--takeover-near-cup must be within [0, 0.2] m and is for --policy rollouts, got {args.takeover_near_cup}",
            file=sys.stderr,
        )
        return 2
    from vla_ros.sim.expert import WRIST_ROLL_LIMIT_RAD

    if not abs(args.grasp_roll) <= WRIST_ROLL_LIMIT_RAD:
        print(
            f"--grasp-roll must be within +-{WRIST_ROLL_LIMIT_RAD:.5g} rad (a turn about the tool's axis), got "
            f"{args.grasp_roll}",
            file=sys.stderr,
        )
        return 2
    if not 0.0 <= args.hold_after_lift <= 10.0:
        print(f"--hold-after-lift must be within [0, 10] s, got {args.hold_after_lift}", file=sys.stderr)
        return 2
    if not 0.0 <= args.grasp_pause <= 5.0:
        print(f"--grasp-pause must be within [0, 5] s, got {args.grasp_pause}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    from vla_ros.model.io import resolve_model_dir
    from vla_ros.robot_profile import ProfileError, load_profile, profile_for_model
    from vla_ros.sim import ArmSim, SimConfig
    from vla_ros.sim.tasks import EVAL_SEED_START, TRAIN_SEED_START

    try:  # --policy: the robot the model drives (default: the one its folder records), with the model's joints
        profile = profile_for_model(resolve_model_dir(args.policy), args.robot) if args.policy else None
        profile = profile or load_profile(args.robot or None)
    except (ProfileError, FileNotFoundError) as err:
        print(f"vla-ros collect: {err}", file=sys.stderr)
        return 2

    seed_start = TRAIN_SEED_START if args.seed_start is None else args.seed_start
    if seed_start < EVAL_SEED_START <= seed_start + args.episodes - 1:
        print(
            f"seeds {seed_start}..{seed_start + args.episodes - 1} reach the evaluation range (>= {EVAL_SEED_START})",
            file=sys.stderr,
        )
        return 2
    if not args.policy:
        config = CollectConfig(
            near_miss_probability=args.near_miss,
            grasp_roll_rad=args.grasp_roll,
            grasp_pause_s=args.grasp_pause,
            hold_after_lift_s=args.hold_after_lift,
            still_hold=args.still_hold,
        )
        try:
            make_expert(config, profile)  # a roll the robot's wrist cannot turn to is refused here, not per episode
        except ValueError as err:  # ProfileError included
            print(f"--grasp-roll {args.grasp_roll:g} on {profile.name}: {err}", file=sys.stderr)
            return 2
        try:
            sim = ArmSim(SimConfig(image_width=config.image_width, image_height=config.image_height), profile=profile)
        except ValueError as err:  # ProfileError included
            print(f"--robot {profile.name}: {err}", file=sys.stderr)
            return 2
    out = Path(args.out or f"runs/demos-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if args.policy:
        summaries = collect_rollouts(
            str(resolve_model_dir(args.policy)),
            range(seed_start, seed_start + args.episodes),
            out,
            TakeoverConfig(
                near_cup_m=args.takeover_near_cup,
                grasp_roll_rad=args.grasp_roll,
                grasp_pause_s=args.grasp_pause,
                hold_after_lift_s=args.hold_after_lift,
                still_hold=args.still_hold,
            ),
            robot=str(profile.source),
        )
        for s in summaries:  # like the expert's failures: a rollout that never lifted the cup is not kept
            if not s["success"] and not args.keep_failures:
                (out / f"rollout_{s['seed']:07d}.mcap").unlink()
        return _finish(out, summaries, seed_start, args.episodes, t0, robot=profile.name)
    summaries = []
    bar = tqdm(range(seed_start, seed_start + args.episodes), desc=f"episodes ({profile.name})", unit="ep")
    for seed in bar:
        path = out / f"episode_{seed:07d}.mcap"
        s = record_episode(sim, seed, path, config)
        if not s["success"] and not args.keep_failures:
            path.unlink()
        summaries.append(s)
        bar.set_postfix(success=f"{np.mean([x['success'] for x in summaries]):.0%}")
    sim.close()
    return _finish(out, summaries, seed_start, args.episodes, t0, robot=profile.name)


def _finish(out: Path, summaries: list[dict], seed_start: int, episodes: int, t0: float, robot: str = "") -> int:
    result = {
        **({"robot": robot} if robot else {}),
        "episodes": len(summaries),
        "successes": int(sum(s["success"] for s in summaries)),
        "kept": len(list(out.glob("*.mcap"))),
        "seeds": [seed_start, seed_start + episodes - 1],
        "wall_s": round(time.time() - t0, 1),
        "out": str(out),
        "megabytes": round(sum(p.stat().st_size for p in out.glob("*.mcap")) / 1e6, 1),
    }
    (out / "collect_summary.json").write_text(json.dumps({"result": result, "episodes": summaries}, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
