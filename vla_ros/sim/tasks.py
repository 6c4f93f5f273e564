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

# Training phrasings: several verbs, several words for the cup, polite, elliptical and indirect forms,
# so the policy learns the request rather than a handful of sentences (the text encoder is frozen; the
# instruction tokens are all the policy reads of the words).
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
    "pick up the {color} mug",
    "lift the {color} mug off the table",
    "grab the {color} one",
    "take hold of the {color} cup and raise it",
    "could you pick up the {color} cup",
    "would you please lift the {color} cup",
    "please grab the {color} mug",
    "fetch the {color} cup",
    "bring me the {color} cup",
    "the {color} cup, please",
    "{color} one please",
    "pick up the {color} container",
    "lift the {color} tumbler",
    "get the {color} cup for me",
    "go and pick up the {color} cup",
    "I need the {color} cup",
    "grasp the {color} mug",
    "raise the {color} one",
    "pick the {color} mug up",
    "the {color} one",
)

# The evaluation's default phrasings: never in training.
HELDOUT_TEMPLATES = (
    "pick up the cup that is {color}",
    "grasp the {color} cup and lift it",
    "I want the {color} cup lifted",
    "lift up the {color} mug",
    "hand me the {color} cup",
)

# Phrasings in neither list, as a new user words the request (``vla-ros eval --instructions unseen``):
# other verbs, other words for the cup, polite and elliptical forms.
UNSEEN_TEMPLATES = (
    "could you grab me the {color} cup",
    "lift that {color} cup up please",
    "pick up the {color} coffee cup",
    "take the {color} mug off the table",
    "{color} mug, lift it",
    "I'd like you to pick up the {color} cup",
    "hoist the {color} cup",
    "kindly lift the {color} one",
    "{color} cup please",
    "can you get the {color} mug",
)


def episode_task(seed: int, templates: tuple[str, ...] = TRAIN_TEMPLATES) -> tuple[str, str]:
    """(colour, instruction) for an episode, drawn from its own seed (independent of the cup layout's draws)."""
    rng = np.random.default_rng([int(seed), 7])
    color = COLORS[int(rng.integers(len(COLORS)))]
    template = templates[int(rng.integers(len(templates)))]
    return color, template.format(color=color)


def eval_episodes(episodes: int, seed: int, templates: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """(episode seed, colour, instruction) of an evaluation's ``episodes``: the seeds from
    ``EVAL_SEED_START + seed`` on (``seed`` is the offset into the evaluation range)."""
    start = EVAL_SEED_START + seed
    return [(ep_seed, *episode_task(ep_seed, templates)) for ep_seed in range(start, start + episodes)]
