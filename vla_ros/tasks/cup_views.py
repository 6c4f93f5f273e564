"""The cup task's rendered training views: many cup layouts for the vision stem, beyond the few hundred of the
episodes (``tasks.cups``).

A few hundred demonstrations show the camera a few hundred cup layouts, and a stem trained on them learns
those layouts rather than how to find a cup of a colour (its error on held-out episodes stalls at
4-5 cm while its training loss keeps falling). Rendering costs milliseconds, so training adds still views: a
fresh layout from a training seed, the arm placed in a pose taken from the demonstrations (so it occludes and
distracts as it does there), the frame tokenized exactly as online (``preprocess_image``), and every
cup's position as the label. The frame head (``ModelConfig.frame_aux_loss_weight``) learns "where is the
<colour> cup" on them, with the instruction vector of a training phrasing naming that colour. The scene is the
sim's for the run's robot profile (``vla_ros.robot_profile``; the bundled arm by default): its arm, its cameras,
its table.

Grasp views (``grasp_share``): the demonstrations' arm poses put the gripper over the cups of *their*
layouts, so on a fresh layout the gripper rarely covers a cup, and the stem sees few frames like the
last centimetres of a grasp (cup half hidden under the fingers, seen from close by). A grasp view places
the tool centre point over one of the layout's cups, a few centimetres off in x and y, anywhere from
the approach height down to the grasp height, the gripper open or closed (``vla_ros.sim.ik.TopDownIK``,
the expert's own inverse kinematics, for any profile's arm).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vla_ros.sim.tasks import COLORS, PHRASING_TEMPLATES, TRAIN_SEED_START

VIEW_SEED_OFFSET = 500_000  # view layouts come from training seeds far from the episodes' own


@dataclasses.dataclass
class Views:
    frames: np.ndarray  # (N, 3, h, w) float32, tokenized
    cups_m: np.ndarray  # (N, len(COLORS), 3) every cup's position, in COLORS order
    instructions: np.ndarray  # (len(COLORS), T, 384): instruction vectors of each training phrasing per colour

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """n random (frame, instruction vector, named cup position (3,)) triples."""
        i = rng.integers(len(self.frames), size=n)
        c = rng.integers(len(COLORS), size=n)
        t = rng.integers(self.instructions.shape[1], size=n)
        return self.frames[i], self.instructions[c, t], self.cups_m[i, c]


GRASP_VIEW_XY_M = 0.03  # grasp views: the tool centre point within this of the cup's axis, in x and y


def grasp_pose(cup_m: np.ndarray, rng: np.random.Generator, ik=None) -> np.ndarray:
    """The commanded joints (the arm, then the gripper) with the tool centre point over ``cup_m`` (see the module
    docstring). ``ik``: a ``vla_ros.sim.ik.TopDownIK`` of the robot (None: the bundled arm's). Raises
    UnreachableError where the arm has no top-down pose there."""
    from vla_ros.sim.scripted import APPROACH_TCP_Z_M, GRASP_TCP_Z_M

    if ik is None:
        from vla_ros.robot_profile import load_profile
        from vla_ros.sim.ik import TopDownIK

        ik = TopDownIK(load_profile(None))
    profile = ik.profile
    xy = np.asarray(cup_m[:2], float) + rng.uniform(-GRASP_VIEW_XY_M, GRASP_VIEW_XY_M, 2)
    z = profile.table_height_m + rng.uniform(GRASP_TCP_Z_M, APPROACH_TCP_Z_M)
    opening = 1.0 if rng.random() < 0.7 else rng.uniform(0.0, 1.0)  # share of the way from closed to open
    closed = np.asarray(profile.gripper_closed)
    gripper = closed + opening * (np.asarray(profile.gripper_open) - closed)
    return np.append(ik.solve(np.array([xy[0], xy[1], z]), 0.0, ik.home).q, gripper)


def render_views(
    n: int,
    tokenizer,
    arm_poses: np.ndarray,
    seed: int = 0,
    image_size: tuple[int, int] = (320, 240),
    progress: bool = True,
    grasp_share: float = 0.0,
    profile=None,
) -> Views:
    """``n`` views (see the module docstring): view k has the layout of seed VIEW_SEED_OFFSET + k and an arm
    pose drawn from ``arm_poses`` (M, commanded joints) with ``seed``, or, for a share ``grasp_share`` of the
    views, a grasp pose over one of its cups. ``profile``: the robot (a RobotProfile, name or file; None: the
    bundled arm)."""
    from tqdm import tqdm

    from vla_ros.model.sequence import instruction_vector
    from vla_ros.sim.arm_sim import ArmSim, SimConfig
    from vla_ros.tokens.convert import preprocess_image
    from vla_ros.tokens.text import shared_encoder

    if n < 1 or len(arm_poses) < 1:
        raise ValueError(f"need n >= 1 views ({n}) and at least one arm pose ({len(arm_poses)})")
    if not 0.0 <= grasp_share <= 1.0:
        raise ValueError(f"grasp_share must be in [0, 1], got {grasp_share}")
    from vla_ros.sim.ik import TopDownIK, UnreachableError

    rng = np.random.default_rng([seed, 29])
    sim = ArmSim(SimConfig(image_width=image_size[0], image_height=image_size[1]), profile=profile)
    if arm_poses.shape[1] != len(sim.command_joint_names):
        sim.close()
        raise ValueError(
            f"arm poses have {arm_poses.shape[1]} joints, {sim.profile.name} commands {len(sim.command_joint_names)} "
            f"({sim.command_joint_names})"
        )
    ik = TopDownIK(sim.profile) if grasp_share > 0 else None
    frames = np.empty((n, 3, tokenizer.image_height, tokenizer.image_width), np.float32)
    cups = np.empty((n, len(COLORS), 3), np.float64)
    try:
        for k in tqdm(range(n), desc="rendering views", unit="view", disable=not progress):
            sim.reset(TRAIN_SEED_START + VIEW_SEED_OFFSET + k)
            positions = sim.cup_positions()
            pose = arm_poses[int(rng.integers(len(arm_poses)))]
            if rng.random() < grasp_share:
                try:
                    pose = grasp_pose(positions[COLORS[int(rng.integers(len(COLORS)))]], rng, ik)
                except UnreachableError:
                    pass  # a cup out of the top-down reach: the demonstration pose stays
            sim.place_arm(pose)
            frames[k] = preprocess_image(sim.render(), tokenizer)
            cups[k] = [positions[c] for c in COLORS]
    finally:
        sim.close()
    encoder = shared_encoder()
    dim = encoder(PHRASING_TEMPLATES[0].format(color=COLORS[0])).embeddings.shape[1]
    instructions = np.stack(
        [[instruction_vector(encoder(t.format(color=c)).embeddings, dim) for t in PHRASING_TEMPLATES] for c in COLORS]
    )
    return Views(frames, cups, instructions.astype(np.float32))
