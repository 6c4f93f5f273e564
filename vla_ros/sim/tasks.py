"""The task distribution: which cup, how it is asked for, and which seeds train and which evaluate.

Training and evaluation never share a seed (cup layout and colour) and evaluation's default phrasings
never appear in training, so the success rate measures generalisation, not memory.
"""

from __future__ import annotations

import numpy as np

from vla_ros.sim.scene import CUP_COLORS

COLORS = tuple(CUP_COLORS)  # red, green, blue

TRAIN_SEED_START = 0  # training episodes use seeds [0, 1_000_000)
EVAL_SEED_START = 1_000_000  # evaluation episodes use seeds from here on

TRAIN_TEMPLATES = (
    "pick up the {color} cup",
    "pick the {color} cup up",
    "lift the {color} cup",
    "grab the {color} cup",
    "take the {color} cup",
    "please pick up the {color} cup",
    "raise the {color} cup off the table",
    "get the {color} one",
    "{color} cup, pick it up",
    "can you lift the {color} cup",
)

HELDOUT_TEMPLATES = (
    "pick up the cup that is {color}",
    "grasp the {color} cup and lift it",
    "I want the {color} cup lifted",
    "lift up the {color} mug",
    "hand me the {color} cup",
)


def episode_task(seed: int, templates: tuple[str, ...] = TRAIN_TEMPLATES) -> tuple[str, str]:
    """(colour, instruction) for an episode, drawn from its own seed (independent of the cup layout's draws)."""
    rng = np.random.default_rng([int(seed), 7])
    color = COLORS[int(rng.integers(len(COLORS)))]
    template = templates[int(rng.integers(len(templates)))]
    return color, template.format(color=color)
