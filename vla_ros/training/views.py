"""Rendered training views: many cup layouts for the vision stem, beyond the few hundred of the episodes.

A few hundred demonstrations show the camera a few hundred cup layouts, and a stem trained on them learns
those layouts rather than how to find a cup of a colour (its error on held-out episodes stalls at
4-5 cm while its training loss keeps falling). Rendering costs milliseconds, so training adds still views: a fresh layout
from a training seed, the arm placed in a pose taken from the demonstrations (so it occludes and
distracts as it does there), the frame tokenized exactly as online (``preprocess_image``), and every
cup's position as the label. The frame head (``ModelConfig.frame_aux_loss_weight``) learns "where is the
<colour> cup" on them, with the instruction vector of a training phrasing naming that colour.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vla_ros.sim.tasks import COLORS, TRAIN_SEED_START, TRAIN_TEMPLATES

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


def render_views(n: int, tokenizer, arm_poses: np.ndarray, seed: int = 0, image_size: tuple[int, int] = (320, 240),
                 progress: bool = True) -> Views:
    """``n`` views (see the module docstring): view k has the layout of seed VIEW_SEED_OFFSET + k and an arm
    pose drawn from ``arm_poses`` (M, 7) with ``seed``."""
    from tqdm import tqdm

    from vla_ros.model.sequence import instruction_vector
    from vla_ros.sim.arm_sim import ArmSim, SimConfig
    from vla_ros.tokens.convert import preprocess_image
    from vla_ros.tokens.text import shared_encoder

    if n < 1 or len(arm_poses) < 1:
        raise ValueError(f"need n >= 1 views ({n}) and at least one arm pose ({len(arm_poses)})")
    rng = np.random.default_rng([seed, 29])
    sim = ArmSim(SimConfig(image_width=image_size[0], image_height=image_size[1]))
    frames = np.empty((n, 3, tokenizer.image_height, tokenizer.image_width), np.float32)
    cups = np.empty((n, len(COLORS), 3), np.float64)
    try:
        for k in tqdm(range(n), desc="rendering views", unit="view", disable=not progress):
            sim.reset(TRAIN_SEED_START + VIEW_SEED_OFFSET + k)
            sim.place_arm(arm_poses[int(rng.integers(len(arm_poses)))])
            frames[k] = preprocess_image(sim.render(), tokenizer)
            positions = sim.cup_positions()
            cups[k] = [positions[c] for c in COLORS]
    finally:
        sim.close()
    encoder = shared_encoder()
    dim = encoder(TRAIN_TEMPLATES[0].format(color=COLORS[0])).embeddings.shape[1]
    instructions = np.stack([[instruction_vector(encoder(t.format(color=c)).embeddings, dim) for t in TRAIN_TEMPLATES] for c in COLORS])
    return Views(frames, cups, instructions.astype(np.float32))
