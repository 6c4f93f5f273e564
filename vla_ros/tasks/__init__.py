"""Training tasks as plug-ins (no rclpy; torch only where a task builds heads or losses).

The model and the trainer are generic: they learn action chunks from any robot's bags. A task adds what
it knows beyond the bags' topics, registered here by name and chosen with ``vla-ros train --task NAME``:

* a fresh model's configuration (``model_config``), and the extra heads a model of it carries (``heads``:
  modules attached to ``VLATransformer`` under the task's own attribute names, so their weights keep those
  names in ``model.safetensors``);
* its losses on those heads (``losses``), added to the action loss by ``VLATransformer.forward``;
* its targets in the training data (``episode_track``, ``chunk_target``, ``frame_targets``);
* its training knobs (``options``, a frozen dataclass; ``TrainConfig.task_options``) and what it does in
  training around the main loop (``training``: a ``TaskTraining`` with episodes to adjust, phrasings to
  swap, rendered views and a warm-up on them).

A model config says which task's heads it carries through the task that ``claims`` it (the cup task claims
a config with auxiliary targets, ``ModelConfig.aux_dim > 0``), so a model folder loads with its heads
whatever it was trained with, the shipped one included. The base ``Task`` is the generic task "none".
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The generic task has no knobs of its own."""


class TaskTraining:
    """What a task does in training beyond the generic loop (the generic task: nothing).

    ``warmup_planned``: steps of the task's warm-up before the main loop (0: none); ``step_loss_name``: the
    history key of its per-step extra loss (None: there is none); ``warmup_loss_name``: that of its warm-up
    losses."""

    warmup_planned = 0
    step_loss_name: str | None = None
    warmup_loss_name = "warmup_task_loss"
    phrasing_swap_p = 0.0

    def episodes(self, episodes: list, summary: dict) -> list:
        """The training episodes as the task learns them (``summary``: the data summary, to add to)."""
        return episodes

    def phrasings(self):
        """None, or a callable instruction text -> other phrasings' token embeddings of the same request
        (``training.data.sample_sequence``), used on a share ``phrasing_swap_p`` of the sequences."""
        return None

    def prepare(self, model, train_episodes: list, rng, device, progress: bool) -> None:
        """Before the deadline starts (not training time): e.g. render views."""

    def warmup(self, model, rng, device, progress: bool, deadline) -> list[float] | None:
        """Train before the main loop; returns the loss of every step (None: no warm-up)."""
        return None

    def step_loss(self, model, rng, device):
        """The loss added to each main-loop step's loss (when ``step_loss_name`` is set)."""
        raise NotImplementedError


class Task:
    """A task; this base class is the generic one, "none": actions from the bags' topics alone (any robot)."""

    name = "none"
    help = "actions from the bags' topics alone (any robot)"
    options = NoOptions
    # the names of its losses (``losses``), recorded per step and per validation as history[name], ["val_<name>"]
    loss_names: tuple[str, ...] = ()
    # history key -> label of the loss curves it adds (``training.train.plot_losses``)
    loss_labels: dict[str, str] = {}
    # option field -> why it needs this task, for an option given to another task
    option_reasons: dict[str, str] = {}
    # whether its episodes come from the sim, which simulates a robot profile's arm (the bundled arm unless
    # ``vla-ros train --robot`` names another): the model then commands that profile's joints
    simulated = False

    def claims(self, config) -> bool:
        """Whether a model of ``config`` carries this task's heads."""
        return False

    def model_config(self):
        """The ModelConfig a fresh model of the task starts from (its normalisation comes from the data)."""
        from vla_ros.model.config import ModelConfig

        return ModelConfig()

    def heads(self, config) -> dict[str, Any]:
        """Attribute name -> module (or None) of the extra heads a model of ``config`` carries."""
        return {}

    def losses(self, model, out, batch) -> list[tuple[str, float, Any]]:
        """(name, weight, loss) of each extra loss on a training batch (``VLATransformer.forward``)."""
        return []

    def episode_track(self, episode):
        """(times, values) the task reads from a replayed episode (``training.data.load_episodes``), or
        (None, None)."""
        return None, None

    def chunk_target(self, config, episode, t_s: float):
        """The auxiliary target of a chunk anchored at ``t_s`` (``ChunkSpec.aux``), or None."""
        return None

    def frame_targets(self, config, episode, observations: list):
        """Per-observation auxiliary targets of a sequence's frames (``build_sequence``'s frame_aux), or None."""
        return None

    def ground_words(self, text: str) -> tuple[str | None, str, str]:
        """What the words of an instruction alone decide (``policy.grounding``): (target, code, detail), code ""
        when they allow it, else a ``reasons.INSTRUCTION_*`` code and why. The generic task knows no targets."""
        return None, "", ""

    def grounding_text(self, text: str) -> str:
        """The instruction as the learned score reads it (the task replaces its targets' words by one)."""
        return " ".join(str(text).lower().split())

    def canonical_instruction(self, target: str | None) -> str | None:
        """The task's own wording of a request for ``target`` (None: the task has none)."""
        return None

    def grounding_pools(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(requests, refusals): instruction texts the learned score trains on (None: the task has none)."""
        return None

    def training(
        self, options, config, tokenizer, seed: int, fine_tune: bool, lr: float, weight_decay: float, robot=None
    ):
        """The task's part of a training run (``TaskTraining``); ``robot``: the run's robot profile, or None (no
        robot named, for the generic task; ``training.train.train_profile``)."""
        return TaskTraining()


_REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Make ``task`` available by its name (``--task NAME``)."""
    if task.name in _REGISTRY:
        raise ValueError(f"task {task.name!r} is registered already")
    _REGISTRY[task.name] = task
    return task


def get_task(name: str) -> Task:
    if name not in _REGISTRY:
        raise ValueError(f"task must be one of {task_names()}, got {name!r}")
    return _REGISTRY[name]


def task_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def task_of(config) -> Task:
    """The task whose heads a model of ``config`` carries (the generic task when none claims it)."""
    return next((t for t in _REGISTRY.values() if t.claims(config)), _REGISTRY["none"])


def _option_names(task: Task) -> set[str]:
    return {f.name for f in dataclasses.fields(task.options)}


def task_options(task: Task, given: Any):
    """``given`` (None, a mapping or the task's options) as the task's options; an option of another task
    says which task it needs."""
    if isinstance(given, task.options):
        return given
    given = dict(given or {})
    for key in given:
        if key not in _option_names(task):
            owner = next(
                (t for t in _REGISTRY.values() if key in {f.name for f in dataclasses.fields(t.options)}), None
            )
            if owner is None:
                raise ValueError(f"{key} is not an option of any task")
            why = owner.option_reasons.get(key)
            raise ValueError(f"{key} needs task {owner.name!r}{f' ({why})' if why else ''}, got task {task.name!r}")
    return task.options(**given)


register(Task())

from vla_ros.tasks import cups  # noqa: E402,F401  (registers itself)
