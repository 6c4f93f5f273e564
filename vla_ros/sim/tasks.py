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


# More phrasings of the same request, beside the recorded ones: other verbs and words for the cup, addresses,
# thanks, word order, relative clauses. Training's phrasing swaps and rendered views draw from both lists
# (``PHRASING_TEMPLATES``), and the instruction check learns what a request looks like from them; the
# demonstrations keep ``TRAIN_TEMPLATES``, so recorded data stays as it was. None is in the held-out or the
# unseen list, nor shares their distinctive words (hoist, kindly, coffee cup, hand me, that is ...).
MORE_TRAIN_TEMPLATES = (
    "robot, lift the {color} mug",
    "lift the {color} cup, thanks",
    "pick up the {color} cup now",
    "now grab the {color} mug",
    "go get the {color} cup",
    "get me the {color} mug please",
    "pick up the {color} beaker",
    "lift the {color} glass",
    "the {color} cup: lift it",
    "{color} mug up please",
    "up with the {color} cup",
    "would you mind lifting the {color} cup",
    "I would like the {color} mug",
    "pick the {color} one up",
    "you should pick up the {color} cup",
    "seize the {color} cup",
    "collect the {color} mug",
    "retrieve the {color} cup",
    "elevate the {color} cup",
    "the cup which is {color}, pick it up",
    "lift the {color} colored cup",
    "pick up the {color} cup from the table",
    "grab this {color} mug",
    "could you take the {color} one",
    "please raise the {color} mug",
    "pick it up, the {color} cup",
    "get hold of the {color} cup",
    "okay, lift the {color} cup",
    "time to pick up the {color} mug",
    "your task: lift the {color} cup",
)
PHRASING_TEMPLATES = TRAIN_TEMPLATES + MORE_TRAIN_TEMPLATES

# Instructions the policy must refuse: negations, colours and objects the scene does not have, two targets
# at once, actions other than a lift, unrelated requests and nonsense. ``{color}`` (where present) is filled
# with the colour of a cup in the scene. The instruction check trains on the training list (and the
# combinations ``refusal_training_texts`` adds); ``vla-ros eval --instructions refuse`` runs the held-out list,
# which shares no instruction with it and avoids its words for colours, objects and actions (yellow, orange,
# bowl, towel, smash, fill, ...).
REFUSE_TRAIN_TEMPLATES = (
    "do not pick up the {color} cup",
    "don't lift the {color} cup",
    "do not touch the {color} mug",
    "never grab the {color} one",
    "leave the {color} cup where it is",
    "don't take the {color} cup",
    "stop, do not lift the {color} cup",
    "no, not the {color} cup",
    "pick up nothing",
    "keep your hands off the {color} cup",
    "the {color} cup must stay on the table",
    "avoid the {color} cup",
    "pick up the purple cup",
    "lift the black mug",
    "grab the white one",
    "take the pink cup",
    "pick up the brown container",
    "fetch the grey cup",
    "purple cup please",
    "pick up the {color} bottle",
    "grab the {color} ball",
    "lift the {color} box",
    "pick up the {color} plate",
    "take the {color} book",
    "pick up the spoon",
    "grab the phone",
    "lift the laptop",
    "pick up the {color} block",
    "pick up the red and the blue cup",
    "lift the green cup and the red cup",
    "grab both cups",
    "pick up all the cups",
    "take every mug",
    "pick up all three cups",
    "lift two cups",
    "what time is it",
    "open the door",
    "wave hello",
    "tell me a joke",
    "turn off the lights",
    "move the arm to the left",
    "clean the table",
    "stack the cups",
    "knock over the {color} cup",
    "throw the {color} cup",
    "pour out the {color} mug",
    "put the {color} cup on the floor",
    "asdf",
    "blorp zibble",
    "cup cup cup",
    "the the the",
    "???",
    "12345",
    "lorem ipsum dolor sit amet",
    "hello",
    "thank you",
    "good morning robot",
    "do nothing",
    "wait",
)
REFUSE_HELDOUT_TEMPLATES = (
    "please don't pick up the {color} cup",
    "whatever you do, do not lift the {color} mug",
    "the {color} cup stays put",
    "hands off the {color} one",
    "I don't want the {color} cup",
    "do not move the {color} cup",
    "not the {color} cup",
    "under no circumstances lift the {color} mug",
    "pick up the yellow cup",
    "lift the orange mug",
    "grab the cyan one",
    "take the silver cup",
    "pick up the gold container",
    "yellow cup please",
    "lift the {color} bowl",
    "grab the {color} pen",
    "pick up the {color} towel",
    "fetch my keys",
    "pick up the apple",
    "grab the {color} bottle cap",
    "lift the red cup and the green cup",
    "grab every cup on the table",
    "pick up two of the cups",
    "take the blue and the red mugs",
    "lift all of them",
    "how are you today",
    "play some music",
    "shut down",
    "dance for me",
    "write an email",
    "go to the kitchen",
    "what is the weather like",
    "smash the {color} cup",
    "push the {color} mug off the table",
    "fill the {color} cup with water",
    "qwerty uiop",
    "glorp the fizz",
    "mug mug mug mug",
    "...",
    "zzz",
)


# Word lists the instruction check's training combines (``request_training_texts``,
# ``refusal_training_texts``): requests to lift the cup, and the same requests for other things, other
# actions on the cup, and their negations.
LIFT_FORMS = (
    "pick up the {o}",
    "lift the {o}",
    "grab the {o}",
    "take the {o}",
    "raise the {o}",
    "get the {o}",
    "fetch the {o}",
    "grasp the {o}",
    "pick the {o} up",
    "bring me the {o}",
    "collect the {o}",
    "retrieve the {o}",
)
CUP_WORDS = ("{color} cup", "{color} mug", "{color} one", "{color} container", "{color} tumbler", "{color} beaker")
OTHER_ACTIONS = (
    "break the {o}",
    "crush the {o}",
    "knock over the {o}",
    "throw the {o}",
    "drop the {o}",
    "shake the {o}",
    "wash the {o}",
    "pour out the {o}",
    "tip over the {o}",
    "kick the {o}",
    "squeeze the {o}",
    "hide the {o}",
    "paint the {o}",
    "slide the {o} to the left",
    "spin the {o}",
    "tilt the {o}",
    "move the {o} aside",
    "put down the {o}",
    "open the {o}",
    "look at the {o}",
    "point at the {o}",
    "describe the {o}",
)
OTHER_OBJECTS = (
    "{color} bottle",
    "{color} ball",
    "{color} box",
    "{color} block",
    "{color} plate",
    "spoon",
    "fork",
    "{color} knife",
    "phone",
    "{color} book",
    "{color} sponge",
    "can",
    "{color} jar",
    "banana",
    "shoe",
    "hammer",
    "remote",
    "{color} toy",
    "lid",
    "napkin",
    "table",
    "chair",
    "laptop",
    "{color} cube",
)
NEGATION_FORMS = ("do not {v}", "don't {v}", "never {v}", "please do not {v}", "you must not {v}", "no, don't {v}")


def request_training_texts() -> tuple[str, ...]:
    """Templates of requests to lift one named cup: the phrasing lists and the lift forms on the cup words."""
    combos = tuple(form.format(o=cup) for form in LIFT_FORMS for cup in CUP_WORDS)
    return tuple(dict.fromkeys(PHRASING_TEMPLATES + combos))


def refusal_training_texts() -> tuple[str, ...]:
    """Templates of instructions to refuse: the training list, other actions on a cup, lifts of other things,
    and negated lifts."""
    combos = [action.format(o=cup) for action in OTHER_ACTIONS for cup in CUP_WORDS[:3]]
    combos += [form.format(o=thing) for form in LIFT_FORMS[:8] for thing in OTHER_OBJECTS]
    combos += [
        neg.format(v=form.format(o=cup)) for neg in NEGATION_FORMS for form in LIFT_FORMS[:6] for cup in CUP_WORDS[:2]
    ]
    return tuple(dict.fromkeys(REFUSE_TRAIN_TEMPLATES + tuple(combos)))


def episode_task(seed: int, templates: tuple[str, ...] = TRAIN_TEMPLATES) -> tuple[str, str]:
    """(colour, instruction) for an episode, drawn from its own seed (independent of the cup layout's draws)."""
    rng = np.random.default_rng([int(seed), 7])
    color = COLORS[int(rng.integers(len(COLORS)))]
    template = templates[int(rng.integers(len(templates)))]
    return color, template.format(color=color)


def eval_episodes(
    episodes: int, seed: int, templates: tuple[str, ...], every_template: bool = False
) -> list[tuple[int, str, str]]:
    """(episode seed, colour, instruction) of an evaluation's ``episodes``: the seeds from
    ``EVAL_SEED_START + seed`` on (``seed`` is the offset into the evaluation range). ``every_template``: the
    templates in turn (episode k the k-th, modulo their number) instead of drawn, so that every one of them runs
    (a list of instructions to refuse, judged per instruction); the colours stay the seeds' own."""
    start = EVAL_SEED_START + seed
    out = []
    for k, ep_seed in enumerate(range(start, start + episodes)):
        color, instruction = episode_task(ep_seed, templates)
        if every_template:
            instruction = templates[k % len(templates)].format(color=color)
        out.append((ep_seed, color, instruction))
    return out
