"""``vla-ros train``: train the policy from MCAP demonstrations (CPU by default, CUDA when available).

Reads every bag through the same token stream the node uses, trains on sequences built with the exact
streaming mask (``training.data``), and writes ``config.json`` + ``model.safetensors`` + ``model.onnx``
into ``--out`` with a report: loss curves (PNG), the data summary and its hash, seeds, duration, git commit.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_ros.model.config import ACTION_LOSSES
from vla_ros.tasks import get_task, task_names, task_of, task_options

EXAMPLE = """examples:
  vla-ros collect --episodes 200 --out runs/demos
  vla-ros train --data runs/demos --out runs/vla_cups --task cups --steps 3600
  vla-ros collect --robot fr3 --episodes 200 --out runs/demos_fr3
  vla-ros train --robot fr3 --data runs/demos_fr3 --out runs/fr3_cups --task cups --steps 3600
  vla-ros train --data bags/ --out models/my_arm --joints j1,j2,j3,j4,j5,j6,gripper --camera-topic /wrist/image_raw \\
      --command-topic /arm_controller/commands --instruction "put the block in the bin"
    (your own robot's bags: rosbag2 folders or .mcap files; see docs/bags.md)"""

log = logging.getLogger(__name__)

TASKS = task_names()  # the registered tasks (``vla_ros.tasks``): "none", "cups"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Args:
    steps: optimiser steps. The schedule is defined on them: linear learning-rate warm-up over
        ``warmup_steps``, cosine decay to lr/10 at ``steps``.
    minutes: wall-clock limit, or None. Only a stop: training ends there even if steps remain (the
        report says so and how many ran); it never shapes the schedule. Counted from the first step
        (replaying bags and rendering views are not training time).
    task: a registered task (``vla_ros.tasks``). "none": any robot's bags, the policy learns the actions from
        the bags' topics alone. "cups" (``tasks.cups``): the sim's cup task adds the named cup's position as
        an auxiliary target (from the bags' episode statuses), rendered still views for the vision stem, and
        the sim camera's crop.
    task_options: the task's own knobs: its options dataclass (``tasks.cups.CupsOptions``), or a mapping of
        its fields (None = its defaults); stored as the options.
    span_s / context_s / chunks: sequence shape (see training.data).
    lr / weight_decay / warmup_steps: AdamW (matrices only, see ``param_groups``) with linear warm-up
        and cosine decay to lr/10.
    val_fraction: share of episodes held out for the validation loss, in whole episodes (``validation_split``:
        one at least where there are two or more, one at least left to train on).
    threads: torch CPU threads (0 = torch's default). Runs repeat bit for bit with the same seed, data
        and thread count on one machine.
    state_noise_rad / state_noise_rad_s: std of the noise on joint-state inputs (training.data).
    drop_states_p: share of training sequences without joint states (training.data.make_sequence).
    grasp_focus_p: share of training sequences that end within half a second of a moment the last joint
        (the gripper) is commanded shut or open (``training.data.gripper_events``), so more of the training
        is spent on the grasp; 0 = sequences end anywhere with equal chance.
    ema_decay: 0 = off. Otherwise the saved model (and the validation loss) is an exponential moving
        average of the weights over the main loop's steps, with this decay per step (``WeightAverage``):
        with one sequence per step the last weights carry the last few sequences' noise.
    image_shift_px: random-shift augmentation: each training sequence's frames move by one random offset of
        up to this many pixels each way (``training.data.shift_images``); 0 = off. Validation is unshifted.
    tool_loss_weight: 0 = off. Otherwise the loss also compares where each predicted and each target chunk
        point puts the tool (``training.tool_points``: forward kinematics of ``robot_description`` down to
        ``tool_link``, four points on the tool, squared distance in units of 5 cm) with this weight.
    robot: the robot profile the demonstrations were recorded with (a name, e.g. "fr3", or a YAML file;
        ``vla_ros.robot_profile``). A fresh model's joints are its commanded joints, the tool loss uses its URDF
        and TCP, the cup task renders its views with it, and the model folder records it (``eval``, ``select``,
        ``demo`` default to it). "" = the bundled arm for the cup task (recorded as such); for the generic task,
        no robot (a robot's own bags: the joints are the model config's).
    robot_description / tool_link: the URDF and the link of the tool frame, for ``tool_loss_weight``; empty =
        the robot profile's (the bundled arm's: vla_arm.urdf, tcp_link).
    end_hold_s: chunk targets past the end of each episode's commands: the last command, held this long
        (``data.targets.chunk_targets``' hold_s; 0 = none, the points carry no loss). For recordings that end
        with the robot at rest on a finished task, so the policy learns to stay there rather than drift.
    checkpoint_steps: steps after which the model (the average when there is one) is also written to
        ``<out>/checkpoints/step_<n>/`` (weights, ONNX, its validation loss), for ``vla-ros select`` to
        choose among. Writing them changes nothing in the run: the saved copy is exported with the random
        state set aside.
    """

    steps: int = (
        3600  # `make model`: about 30 min at 2 steps/s, the shipped configuration on 2 CPU cores (docs/training.md)
    )
    minutes: float | None = None
    task: str = "none"
    task_options: Any = None
    span_s: float = 1.0
    context_s: float = 0.5
    chunks: int = 24
    batch_sequences: int = 1
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 200
    grad_clip: float = 1.0
    val_fraction: float = 0.1
    val_every: int = 200
    val_sequences: int = 24
    seed: int = 0
    threads: int = 0
    state_noise_rad: float = 0.02
    state_noise_rad_s: float = 0.1
    drop_states_p: float = 0.4
    grasp_focus_p: float = 0.0
    ema_decay: float = 0.0
    image_shift_px: int = 0
    tool_loss_weight: float = 0.0
    robot: str = ""
    robot_description: str = ""
    tool_link: str = ""
    end_hold_s: float = 0.0
    checkpoint_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.steps <= 0 or self.warmup_steps < 0:
            raise ValueError(f"steps ({self.steps}) must be > 0 and warmup_steps ({self.warmup_steps}) >= 0")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be > 0 or None (no time limit), got {self.minutes}")
        object.__setattr__(self, "task_options", task_options(get_task(self.task), self.task_options))
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if not 0.0 <= self.grasp_focus_p <= 1.0:
            raise ValueError(f"grasp_focus_p must be in [0, 1], got {self.grasp_focus_p}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) (0 = off), got {self.ema_decay}")
        if not (math.isfinite(self.tool_loss_weight) and self.tool_loss_weight >= 0):
            raise ValueError(f"tool_loss_weight must be >= 0 (0 = off), got {self.tool_loss_weight}")
        if not 0.0 <= self.end_hold_s <= 10.0:  # NaN fails too
            raise ValueError(f"end_hold_s must be in [0, 10] seconds (0 = off), got {self.end_hold_s}")
        if not 0 <= self.image_shift_px <= 8:
            raise ValueError(f"image_shift_px must be in [0, 8] pixels, got {self.image_shift_px}")
        bad = [s for s in self.checkpoint_steps if not 0 < s <= self.steps]
        if bad or len(set(self.checkpoint_steps)) != len(self.checkpoint_steps):
            raise ValueError(
                f"checkpoint_steps must be distinct steps in [1, steps={self.steps}], got {list(self.checkpoint_steps)}"
            )


def task_model_config(task: str):
    """The ModelConfig a fresh model of ``task`` starts from (its normalisation comes from the data)."""
    return get_task(task).model_config()


def train_profile(tc: TrainConfig):
    """The robot profile of a run (``TrainConfig.robot``): the one named, else the bundled arm for a task that
    simulates a robot (the cup task), else None (the generic task on a robot's own bags). Raises ProfileError (a
    ValueError) naming what is wrong with it."""
    from vla_ros.robot_profile import load_profile

    if tc.robot or get_task(tc.task).simulated:
        return load_profile(tc.robot or None)
    return None


def check_robot_joints(config, profile, what: str) -> None:
    """Refuse a model config whose joints are not the robot profile's commanded joints, naming both lists."""
    if profile is not None and tuple(config.joint_names) != profile.commanded_joints:
        raise ValueError(
            f"{what} commands joints {list(config.joint_names)}, but robot {profile.name} commands "
            f"{list(profile.commanded_joints)} (arm, then gripper): a model for this robot has its joints"
        )


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to lr/10 at ``steps``: a function of the step alone."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    progress = min(1.0, step / tc.steps)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def param_groups(model, weight_decay: float, params=None) -> list[dict]:
    """AdamW groups: weight decay on matrices (and convolution kernels) only. Biases, norm gains, the
    keypoint softmax's log-temperature and other vectors are not decayed: pulling a gain or a temperature
    towards zero changes what the layer computes rather than making it simpler. ``params``: restrict to
    these parameters (the vision warm-up trains the stem and the frame head alone)."""
    wanted = None if params is None else {id(p) for p in params}
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and (wanted is None or id(p) in wanted)]
    return [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]


class WeightAverage:
    """Exponential moving average of a model's weights: after each optimiser step, every averaged parameter
    moves ``1 - d`` of the way to the trained one, with ``d = min(decay, (1 + n) / (10 + n))`` at the n-th
    update so the first updates do not keep the starting weights for hundreds of steps. Buffers (fixed
    statistics such as the mean image) are copied, not averaged. ``module`` is a full model to validate
    and save."""

    def __init__(self, model, decay: float) -> None:
        import copy

        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.updates = 0
        self.module = copy.deepcopy(model)
        for p in self.module.parameters():
            p.requires_grad_(False)

    def update(self, model) -> None:
        import torch

        d = min(self.decay, (1.0 + self.updates) / (10.0 + self.updates))
        with torch.no_grad():
            for avg, p in zip(self.module.parameters(), model.parameters()):
                avg.lerp_(p.detach(), 1.0 - d)
            for avg, b in zip(self.module.buffers(), model.buffers()):
                avg.copy_(b)
        self.updates += 1


class Deadline:
    """The optional wall-clock stop (``TrainConfig.minutes``): it ends a run, it never shapes one."""

    def __init__(self, minutes: float | None) -> None:
        self.end = None if minutes is None else time.monotonic() + 60.0 * minutes
        self.hit = False

    def passed(self) -> bool:
        self.hit = self.hit or (self.end is not None and time.monotonic() >= self.end)
        return self.hit


@contextlib.contextmanager
def subnormals_flushed():
    """Flush subnormal floats to zero in this thread while training, and restore the setting after.

    Gradients of a converging loss reach the subnormal range, where some CPUs (the Intel Xeons measured) take
    a slow path on every operation: a view warm-up step's backward pass took 180 ms instead of 50 ms there.
    Flushing is deterministic, so runs stay repeatable. It is processor state of the calling thread, so it is
    undone on the way out: code running in the same process after training (Hypothesis, for one, refuses to
    run without subnormals) sees the floats it had.
    """
    import torch

    was_on = float((torch.tensor([1e-30]) * 1e-10)[0]) == 0.0  # 1e-40 is subnormal in float32
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if not was_on:
            torch.set_flush_denormal(False)


def train(
    data_dir: str | Path | list,
    out: str | Path,
    tc: TrainConfig = TrainConfig(),
    model_config=None,
    device: str = "auto",
    progress: bool = True,
    init: str | Path | None = None,
    selection=None,
) -> dict:
    """Train a model on the bags under ``data_dir`` (a folder or a list of folders).

    ``model_config``: the architecture of a fresh model (default: ``task_model_config(tc.task)``).
    ``selection``: a :class:`vla_ros.data.selection.BagSelection` (the bags' topic names, the commands'
    joint order, an instruction for the whole bag); None = the sim's topics.
    ``init``: a model folder to continue from (its weights and its config, normalisation included), e.g.
    to fine-tune on expert-labelled rollouts of that model (``vla-ros collect --policy``).
    """
    with subnormals_flushed():
        return _train(data_dir, out, tc, model_config, device, progress, init, selection)


def _train(data_dir, out, tc: TrainConfig, model_config, device: str, progress: bool, init, selection) -> dict:
    """The run, step by step: data, model, validation, the task's preparation and warm-up, the main loop, the
    report and the saved folder."""
    import torch

    from vla_ros.model.runtime import resolve_device

    t_start = time.monotonic()
    if tc.threads:
        torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    task = get_task(tc.task)
    profile = train_profile(tc)
    config, model = _starting_point(task, model_config, init, profile)
    training = task.training(
        tc.task_options, config, _tokenizer(config), tc.seed, init is not None, tc.lr, tc.weight_decay, robot=profile
    )
    train_eps, val_eps, data_summary, val_note = _load_data(
        data_dir, tc, config, task, training, selection, rng, progress
    )
    dev = resolve_device(device)
    model, config = _place_model(model, config, train_eps, tc, dev)
    tool = tool_points(tc, config, profile)
    if tool is not None:
        tool = tool.to(dev)
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr)
    history = _new_history(model.task.loss_names)
    validation = Validation(_validation_batches(config, val_eps, tc), dev, tool, history, model.task.loss_names)
    training.prepare(model, train_eps, rng, dev, progress)
    if training.step_loss_name:
        history[training.step_loss_name] = []
    loop = MainLoop(model, opt, tool, training, history, tc, dev, progress)
    loop.events = [_gripper_events(e) for e in train_eps] if tc.grasp_focus_p > 0 else None
    loop.phrasings = training.phrasings()
    deadline = Deadline(tc.minutes)  # the limit counts from here: loading and rendering are not training time
    clock = {"start": (t_start, 0.0), "train": (time.monotonic(), time.process_time())}
    warmup_losses = training.warmup(model, rng, dev, progress, deadline)
    if warmup_losses is not None:
        history[training.warmup_loss_name] = warmup_losses
    clock["warm"] = (time.monotonic(), time.process_time())
    # The average starts after the view warm-up: the stem's warm-up weights are a starting point, not a result.
    loop.average = WeightAverage(model, tc.ema_decay) if tc.ema_decay > 0 else None
    validation.average = loop.average
    # What every saved folder records of where it came from (checkpoints and the final model alike).
    provenance = {"data_sha256": data_summary["sha256"], "seed": str(tc.seed), "git_commit": git_commit()}
    if profile is not None:  # the robot it drives: eval, select and demo default to it and refuse another's joints
        from vla_ros.robot_profile import model_metadata

        provenance |= model_metadata(tc.robot, profile)
    loop.deadline, loop.provenance = deadline, provenance
    loop.run(train_eps, config, rng, validation, Path(out), t_start)
    clock["end"] = (time.monotonic(), time.process_time())
    warmup_run = len(history.get(training.warmup_loss_name, []))
    if deadline.hit:
        _warn_stopped(tc, warmup_run, training.warmup_planned, loop.step)
    finals = _final_validation(validation, model, loop.average)
    platform = {"device": str(dev), "threads": torch.get_num_threads(), "torch": torch.__version__}
    split = (len(train_eps), len(val_eps), val_note)
    report = _report(tc, data_dir, init, data_summary, split, loop, clock, warmup_run, finals, platform)
    learned = train_grounding_of(task, config.max_text_tokens)
    report["grounding"] = None if learned is None else learned.meta
    _save(loop.saved(), Path(out), report, history, provenance, task.loss_labels)
    for folder in [Path(out), *loop.checkpoints] if learned is not None else []:
        learned.save(folder)  # whichever ``vla-ros select`` keeps carries it
    return report


def train_grounding_of(task, max_tokens: int):
    """The task's instruction check (``policy.grounding``; it depends on the task, not on the run: its own seed
    is 0 whatever the run's) for the run's model folder and every checkpoint, from the disk cache after the
    first run of a task (seconds otherwise, after the training deadline); None for a task without instruction
    pools. ``vla-ros grounding train --model DIR`` trains it again with its cross-validated figures."""
    if task.grounding_pools() is None:
        return None
    from vla_ros.policy.grounding import cached_grounding
    from vla_ros.tokens.text import shared_encoder

    learned = cached_grounding(shared_encoder(max_tokens), task, 0, max_tokens)
    log.info("instruction check: %s", json.dumps(learned.meta))
    return learned


def _warn_stopped(tc: TrainConfig, warmup_run: int, warmup_planned: int, steps: int) -> None:
    log.warning(
        "stopped by the %.1f-minute limit after %d of %d warm-up steps and %d of %d steps: the learning rate had not "
        "finished its schedule",
        tc.minutes,
        warmup_run,
        warmup_planned,
        steps,
        tc.steps,
    )


def _final_validation(validation, model, average) -> tuple[float | None, float | None]:
    """The saved model's validation loss and, with an average, the last trained weights' too: what the average
    changed, on the same sequences. None without validation episodes (the report's val_note says why)."""
    if not validation.batches:
        return None, None
    return validation(model), (validation(model, model, record=False) if average is not None else None)


def _tokenizer(config):
    from vla_ros.tokens import TokenizerConfig

    return TokenizerConfig.from_model_config(config.to_dict())


def _gripper_events(episode):
    from vla_ros.training.data import gripper_events

    return gripper_events(episode)


def _starting_point(task, model_config, init, profile=None):
    """The config a run starts from, and the model of ``init`` (None: a fresh one, built once the data's
    normalisation is known). With a robot ``profile``, a fresh model of the task's default config commands the
    profile's joints; a given config or ``init`` must already (ValueError naming both lists)."""
    from vla_ros.model.io import load_model

    config = model_config or task.model_config()
    if profile is not None and model_config is None and init is None:
        config = config.replace(joint_names=profile.commanded_joints)
    model = None
    if init is not None:
        # It keeps the statistics it was trained with (inputs mean the same), and the data is tokenized
        # the way it sees it.
        model = load_model(init)
        config = model.config
    check_robot_joints(config, profile, f"the model to continue from ({init})" if init is not None else "the model")
    heads = task_of(config)
    if heads is not task and heads.name != "none":
        log.warning(
            "the model has the heads of task %r but task %r gives them no targets; they stay untrained",
            heads.name,
            task.name,
        )
    return config, model


def _load_data(data_dir, tc: TrainConfig, config, task, training, selection, rng, progress: bool):
    """Replay the bags as the model sees them, let the task adjust the episodes, hold out validation episodes.
    Returns (training episodes, validation episodes, data summary)."""
    from vla_ros.data.selection import BagSelection
    from vla_ros.training.data import load_episodes

    selection = selection or BagSelection()
    selection = dataclasses.replace(selection, topics=selection.topics.with_cameras(config.cameras))
    episodes, summary = load_episodes(
        data_dir,
        _tokenizer(config),
        config.max_lateness_s,
        progress=progress,
        selection=selection,
        task=task,
        min_frame_interval_s=config.min_frame_interval_s,
    )
    episodes = training.episodes(episodes, summary)
    order = rng.permutation(len(episodes))
    n_val, note = validation_split(len(episodes), tc.val_fraction)
    if note and tc.val_fraction > 0:  # asked for a split it could not have as asked
        log.warning("%s", note)
    return [episodes[i] for i in order[n_val:]], [episodes[i] for i in order[:n_val]], summary, note


def validation_split(episodes: int, fraction: float) -> tuple[int, str | None]:
    """How many of ``episodes`` to hold out for the validation loss at ``val_fraction`` ``fraction``, and why
    that differs from the share asked for (None when it does not).

    The share rounds to whole episodes. Where it rounds to none, one episode is held out all the same (a
    run with a validation loss beats one without, even on a few episodes), unless there is a single one;
    at least one is always left to train on."""
    share = round(fraction * episodes)
    n_val = min(max(share, 1), episodes - 1) if episodes > 1 and fraction > 0 else 0
    if fraction == 0:
        return 0, "val_fraction is 0: no episode held out, so no validation loss"
    asked = f"a validation split of {100 * fraction:g}%"
    if episodes < 2:
        alone = "training on it alone" if episodes == 1 else "nothing to train on"
        count = f"{episodes} episode{'s' * (episodes != 1)}"
        return 0, f"{count}: too few for {asked} (needs >= 2); {alone}, no validation loss"
    if share == 0:
        ratio = 0.5 / fraction  # a share rounds to one episode from just past this many episodes
        needed = f">= {max(2, math.floor(ratio) + 1)}" if ratio < 1e9 else f"> {ratio:.3g}"
        return n_val, (
            f"{episodes} episodes: too few for {asked} (needs {needed}); holding out 1 episode for the "
            f"validation loss and training on {episodes - 1}"
        )
    if share > n_val:
        return n_val, f"{episodes} episodes: {asked} would leave none to train on; holding out {n_val}, training on 1"
    return n_val, None


def _place_model(model, config, train_eps, tc: TrainConfig, dev):
    """The model on ``dev``: the one continued from, or a fresh one with the training data's normalisation
    and mean image. Returns (model, its config)."""
    import torch

    from vla_ros.model.model import VLATransformer
    from vla_ros.training.data import mean_image, normalisation_stats

    if model is not None:
        return model.to(dev), config
    config = config.replace(**normalisation_stats(train_eps, config, tc.end_hold_s))
    model = VLATransformer(config).to(dev)
    model.patch_encoder.mean_image.copy_(torch.from_numpy(mean_image(train_eps)))
    return model, config


def _validation_batches(config, val_eps, tc: TrainConfig) -> list:
    """Fixed validation sequences of the held-out episodes (their own random stream, seed + 1)."""
    from vla_ros.model.sequence import collate
    from vla_ros.training.data import sample_sequence

    val_rng = np.random.default_rng(tc.seed + 1)
    return [
        collate(
            [sample_sequence(config, val_eps, tc.span_s, tc.context_s, tc.chunks, val_rng, end_hold_s=tc.end_hold_s)]
        )
        for _ in range(tc.val_sequences if val_eps else 0)
    ]


def _new_history(loss_names) -> dict[str, list]:
    """Per step: the action loss, its error in radians, the model's other losses; per validation the same."""
    names = (*loss_names, "tool_loss")
    return {
        "step": [],
        "loss": [],
        "mae": [],
        **{name: [] for name in names},
        "val_step": [],
        "val_loss": [],
        **{f"val_{name}": [] for name in names},
    }


class Validation:
    """The action loss on the validation sequences; the model's other losses go to ``history["val_<name>"]``."""

    def __init__(self, batches: list, dev, tool, history: dict, loss_names) -> None:
        self.batches, self.dev, self.tool, self.history = batches, dev, tool, history
        self.names = (*loss_names, "tool_loss")
        self.average = None

    def __call__(self, model, net=None, record: bool = True) -> float:
        """The loss of ``net`` (default: the one that is saved, the weight average when there is one); the
        trained ``model`` goes back to training mode. ``record``: the other losses go to the history."""
        import torch

        net = net if net is not None else (self.average.module if self.average is not None else model)
        net.eval()
        with torch.no_grad():
            infos = [net(b.to(self.dev), tool=self.tool)[1] for b in self.batches]
        model.train()
        if record:
            for name in self.names:
                self.history[f"val_{name}"].append(
                    float(np.mean([i.get(name, np.nan) for i in infos])) if infos else float("nan")
                )
        return float(np.mean([i["loss"] for i in infos])) if infos else float("nan")


class MainLoop:
    """The optimiser steps: a batch of sampled sequences, the model's loss and the task's, one update."""

    def __init__(self, model, opt, tool, training, history: dict, tc: TrainConfig, dev, progress: bool) -> None:
        self.model, self.opt, self.tool, self.training, self.history = model, opt, tool, training, history
        self.tc, self.dev, self.progress = tc, dev, progress
        self.events = self.phrasings = self.average = self.deadline = None
        self.provenance: dict = {}
        self.step, self.best_val, self.smooth = 0, float("inf"), None
        self.checkpoints: list[Path] = []

    def saved(self):
        """The model that is saved: the weight average when there is one."""
        return self.average.module if self.average is not None else self.model

    def batch(self, config, train_eps, rng):
        from vla_ros.model.sequence import collate
        from vla_ros.training.data import sample_sequence

        tc = self.tc
        noise = (tc.state_noise_rad, tc.state_noise_rad_s)
        sequences = [
            sample_sequence(
                config,
                train_eps,
                tc.span_s,
                tc.context_s,
                tc.chunks,
                rng,
                noise,
                tc.drop_states_p,
                self.phrasings,
                self.training.phrasing_swap_p,
                self.events,
                tc.grasp_focus_p,
                shift_px=tc.image_shift_px,
                end_hold_s=tc.end_hold_s,
            )
            for _ in range(tc.batch_sequences)
        ]
        return collate(sequences).to(self.dev)

    def update(self, config, train_eps, rng) -> dict:
        """One optimiser step; returns the model's loss info."""
        import torch

        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.step, self.tc)
        loss, info = self.model(self.batch(config, train_eps, rng), tool=self.tool)
        if self.training.step_loss_name:
            extra = self.training.step_loss(self.model, rng, self.dev)
            self.history[self.training.step_loss_name].append(float(extra.detach()))
            loss = loss + extra
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.grad_clip)
        self.opt.step()
        if self.average is not None:
            self.average.update(self.model)
        return info

    def record(self, info: dict) -> None:
        self.smooth = info["loss"] if self.smooth is None else 0.98 * self.smooth + 0.02 * info["loss"]
        self.history["step"].append(self.step)
        self.history["loss"].append(info["loss"])
        self.history["mae"].append(info["mae"])
        for name in self.model.task.loss_names:
            self.history[name].append(info.get(name, float("nan")))
        self.history["tool_loss"].append(info.get("tool_loss", float("nan")))

    def run(self, train_eps, config, rng, validation, out: Path, t_start: float) -> None:
        from tqdm import tqdm

        tc, history = self.tc, self.history
        bar = tqdm(total=tc.steps, desc="training", unit="step", disable=not self.progress)
        self.model.train()
        while self.step < tc.steps and not self.deadline.passed():
            self.record(self.update(config, train_eps, rng))
            self.step += 1
            bar.update(1)
            if self.step % tc.val_every == 0 and validation.batches:
                v = validation(self.model)
                history["val_step"].append(self.step)
                history["val_loss"].append(v)
                self.best_val = min(self.best_val, v)
                bar.set_postfix(loss=f"{self.smooth:.4f}", val=f"{v:.4f}")
            elif self.step % 10 == 0:
                bar.set_postfix(loss=f"{self.smooth:.4f}")
            if self.step in tc.checkpoint_steps:
                # the validation loss of these weights, computed once: a checkpoint on a validation step reuses it
                step = self.step
                val = (
                    history["val_loss"][-1]
                    if history["val_step"][-1:] == [step]
                    else (validation(self.model, record=False) if validation.batches else None)
                )
                self.checkpoints.append(out / CHECKPOINTS_DIR / f"step_{step:05d}")
                minutes = (time.monotonic() - t_start) / 60.0
                save_checkpoint(self.saved(), self.checkpoints[-1], step, tc, val, minutes, self.provenance)
        bar.close()


def _report(tc, data_dir, init, data_summary, split, loop, clock, warmup_run, finals, platform) -> dict:
    """What the run did: data, timing per phase, losses, provenance (``train_report.json`` without history)."""
    history, step, model = loop.history, loop.step, loop.model
    (t_start, _), (t_train, cpu_train), (t_warm, cpu_warm), (t_end, cpu_end) = (
        clock[k] for k in ("start", "train", "warm", "end")
    )
    final_val, final_val_raw = finals
    return {
        "data": {
            **data_summary,
            "train_episodes": split[0],
            "val_episodes": split[1],
            "path": str(data_dir) if isinstance(data_dir, (str, Path)) else [str(d) for d in data_dir],
        },
        "init": str(init) if init is not None else None,
        "task": tc.task,
        "train_config": dataclasses.asdict(tc),
        "steps": step,
        "steps_planned": tc.steps,
        "stopped_by_time_limit": loop.deadline.hit,
        "duration_min": round((time.monotonic() - t_start) / 60.0, 2),
        "device": platform["device"],
        "threads": platform["threads"],
        "vision_warmup_steps": warmup_run,
        # Wall and process CPU seconds of each phase: CPU / wall below the thread count means the run shared
        # its cores (a busy machine), which the step rates alone do not show.
        "timing_s": {
            "before_training": round(t_train - t_start, 1),
            "vision_warmup": round(t_warm - t_train, 1),
            "vision_warmup_cpu": round(cpu_warm - cpu_train, 1),
            "main": round(t_end - t_warm, 1),
            "main_cpu": round(cpu_end - cpu_warm, 1),
        },
        "steps_per_s": round(step / max(t_end - t_warm, 1e-9), 3),
        "vision_warmup_steps_per_s": round(warmup_run / max(t_warm - t_train, 1e-9), 3) if warmup_run else None,
        "final_train_loss_smoothed": loop.smooth,
        "final_val_loss": final_val,
        "final_val_loss_last_weights": final_val_raw,
        "val_note": split[2],  # why the split is not the share asked for, or why there is no validation loss
        **{f"final_val_{n}": history[f"val_{n}"][-1] if history[f"val_{n}"] else None for n in model.task.loss_names},
        "final_val_tool_loss": history["val_tool_loss"][-1]
        if loop.tool is not None and history["val_tool_loss"]
        else None,
        "best_val_loss": loop.best_val if loop.best_val < float("inf") else None,
        "final_mae_rad": float(np.mean(history["mae"][-100:])) if history["mae"] else None,
        "parameters": model.num_parameters(),
        "git_commit": loop.provenance["git_commit"],
        "torch": platform["torch"],
        "checkpoints": [str(c) for c in loop.checkpoints],
    }


def _save(saved, out: Path, report: dict, history: dict, provenance: dict, labels: dict) -> None:
    """The model folder (weights, ONNX, config.json with the run's summary), the report and the loss curves."""
    from vla_ros.model.io import save_model

    metadata = {
        "training": json.dumps(
            {
                k: report[k]
                for k in ("task", "steps", "stopped_by_time_limit", "duration_min", "final_val_loss", "git_commit")
            }
        ),
        **provenance,
    }
    save_model(saved.cpu(), out, metadata=metadata, onnx=True)
    (out / "train_report.json").write_text(json.dumps({**report, "history": history}, indent=1))
    plot_losses(history, out / "loss.png", labels)


CHECKPOINTS_DIR = "checkpoints"


def save_checkpoint(
    net, folder: Path, step: int, tc: TrainConfig, val_loss: float | None, minutes: float, provenance: dict
) -> None:
    """Write a copy of ``net`` as a complete model folder (weights, ONNX) with a report of its step.

    The export runs on a CPU copy under a forked random state, so a run with checkpoints trains exactly as
    one without them."""
    import copy

    import torch

    from vla_ros.model.io import save_model

    with torch.random.fork_rng(devices=[]):
        snapshot = copy.deepcopy(net).cpu().eval()
        save_model(snapshot, folder, metadata={**provenance, "checkpoint_step": str(step)}, onnx=True)
    report = {
        "checkpoint": True,
        "steps": step,
        "steps_planned": tc.steps,
        "stopped_by_time_limit": False,
        "final_val_loss": val_loss,
        "duration_min": round(minutes, 2),
        "train_config": dataclasses.asdict(tc),
    }
    (folder / "train_report.json").write_text(json.dumps(report, indent=1))
    val = f"validation loss {val_loss:.4f}" if val_loss is not None else "no validation episodes"
    log.info("checkpoint at step %d: %s (%s)", step, folder, val)


def tool_points(tc: TrainConfig, config, profile=None):
    """The tool-position loss term of ``tc`` for a model of ``config`` (None when off): the URDF and tool link of
    ``tc``, else of the robot ``profile`` (``train_profile``; None: the bundled arm's). Raises ValueError for a
    state-relative model (its targets are offsets, not joint positions) or a tool the URDF cannot reach through the
    model's joints."""
    if not tc.tool_loss_weight:
        return None
    if config.relative_actions:
        raise ValueError(
            "tool_loss_weight needs joint-position chunks; a state-relative model's (relative_actions) targets are "
            "offsets"
        )
    from vla_ros.robot_profile import load_profile
    from vla_ros.training.tool_points import ToolPoints

    profile = profile or load_profile(None)
    urdf = Path(tc.robot_description) if tc.robot_description else profile.urdf
    if not urdf.is_file():
        raise ValueError(f"robot description {urdf} does not exist")
    return ToolPoints(urdf, config.joint_names, tc.tool_link or profile.tcp_link, weight=tc.tool_loss_weight)


def plot_losses(history: dict, path: Path, labels: dict[str, str] | None = None) -> None:
    """The loss curves: the action loss per step (and smoothed), the validation loss, and each curve
    ``labels`` names (history key -> label, ``tasks.Task.loss_labels``): a per-step series smoothed like the
    action loss, a ``val_`` series at the validation steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    steps, loss = np.asarray(history["step"]), np.asarray(history["loss"])
    k = max(1, len(loss) // 100)  # smoothing window (a run stopped before its first step has no curve)
    if len(loss):
        ax.plot(steps, loss, color="0.8", lw=0.6, label="train (per step)")
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1 :], smooth, color="C0", lw=1.5, label=f"train ({k}-step mean)")
    extra = [(key, label) for key, label in (labels or {}).items() if not key.startswith("val_")]
    for (key, label), color in zip(extra, ("C1", "C5", "C6")):
        series = np.asarray(history.get(key, []))
        if len(series) > k:
            ax.plot(
                steps[k - 1 : len(series)],
                np.convolve(series, np.ones(k) / k, mode="valid"),
                color=color,
                lw=1.0,
                label=label,
            )
    if history["val_loss"]:
        ax.plot(history["val_step"], history["val_loss"], "o-", color="C3", ms=3, label="validation")
        val = [(key, label) for key, label in (labels or {}).items() if key.startswith("val_")]
        for (key, label), (style, color) in zip(val, (("s--", "C2"), ("^:", "C4"), ("v-.", "C7"))):
            series = history.get(key, [])[: len(history["val_step"])]
            if series and np.isfinite(series).any():
                ax.plot(history["val_step"], series, style, color=color, ms=3, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("MSE (normalised joint positions)")
    ax.set_title("vla-ros train")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a run stopped before its first step has no curve
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _names(text: str | None) -> tuple[str, ...] | None:
    """'a,b c' -> ('a', 'b', 'c'); None stays None."""
    return None if text is None else tuple(n for n in text.replace(",", " ").split() if n)


def _steps(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"--checkpoints takes comma-separated step numbers, got {text!r}") from None


# TrainConfig fields set on the command line: option, field, type, metavar, help ("{default}": the field's).
TRAIN_OPTIONS = (
    (
        "--steps",
        "steps",
        int,
        None,
        "optimiser steps; the learning-rate schedule is defined on them (default {default})",
    ),
    ("--warmup-steps", "warmup_steps", int, None, "linear learning-rate warm-up steps (default {default})"),
    (
        "--minutes",
        "minutes",
        float,
        None,
        "wall-clock limit: stop there even if steps remain (the report says so); default none",
    ),
    (
        "--grasp-focus",
        "grasp_focus_p",
        float,
        "P",
        "share of training sequences that end within 0.5 s of the last joint (the gripper) being commanded shut or "
        "open (default {default})",
    ),
    (
        "--ema",
        "ema_decay",
        float,
        "DECAY",
        "save an exponential moving average of the weights with this decay per step, e.g. 0.998 (default {default}: "
        "off, the last weights)",
    ),
    (
        "--image-shift",
        "image_shift_px",
        int,
        "PX",
        "shift each training sequence's frames by a random offset of up to PX pixels each way (augmentation; default "
        "{default}: off)",
    ),
    (
        "--tool-loss",
        "tool_loss_weight",
        float,
        "W",
        "also weigh where each chunk point puts the tool (forward kinematics of the URDF, squared distance in units of "
        "5 cm) with weight W, e.g. 0.1 (default {default}: off)",
    ),
    (
        "--end-hold",
        "end_hold_s",
        float,
        "S",
        "chunk targets past the end of each recording: its last command, held S seconds (0 = none: those points carry "
        "no loss; TrainConfig.end_hold_s)",
    ),
    ("--seed", "seed", int, None, None),
    ("--threads", "threads", int, None, "torch CPU threads (0 = default)"),
    ("--lr", "lr", float, None, None),
)

# ModelConfig fields a fresh model takes from the command line: option, field, what a fine-tune (--init) keeps
# instead, argparse settings, the value (None: not given).
MODEL_OPTIONS = (
    (
        "--cameras",
        "cameras",
        "the cameras",
        dict(
            help="camera streams a fresh model reads, comma-separated, main view first (default: camera); e.g. "
            "camera,wrist_camera: the others are read from /<name>/image_raw"
        ),
        _names,
    ),
    (
        "--max-frame-rate",
        "max_frame_rate_hz",
        "the frame rate",
        dict(
            type=float,
            help="frames per second per camera a fresh model reads (default: every frame); e.g. 15 with two 30 Hz "
            "cameras: the tokens, and the step cost, of one camera at 30 Hz",
        ),
        None,
    ),
    (
        "--action-loss",
        "action_loss",
        "the loss",
        dict(choices=ACTION_LOSSES, help="loss on the action points (ModelConfig.action_loss; default mse)"),
        None,
    ),
    (
        "--relative-actions",
        "relative_actions",
        "the action frame",
        dict(
            action="store_true",
            help="a fresh model's chunks are offsets from the newest measured joint positions, not positions "
            "(ModelConfig.relative_actions; default: positions)",
        ),
        lambda given: given or None,
    ),
    (
        "--pin-first-frame",
        "pin_first_frame",
        "the inputs",
        dict(
            action="store_true",
            help="a fresh model keeps the main camera's first frame of each episode beside its window "
            "(ModelConfig.pin_first_frame; default: the window alone)",
        ),
        lambda given: given or None,
    ),
)


# Your own robot's bags: option, default, metavar, help.
ROBOT_OPTIONS = (
    ("--joints", None, None, "joint names to learn, in order (comma-separated); the joint states must name them all"),
    ("--command-joints", None, None, "joint order of the Float64MultiArray commands (default: --joints)"),
    ("--camera-topic", None, None, "sensor_msgs/Image or CompressedImage topic (default /camera/image_raw)"),
    ("--joint-states-topic", None, None, "sensor_msgs/JointState topic (default /joint_states)"),
    (
        "--command-topic",
        None,
        None,
        "std_msgs/Float64MultiArray commands, the targets (default /forward_position_controller/commands)",
    ),
    ("--instruction-topic", None, None, "std_msgs/String instruction topic (default /vla/instruction)"),
    ("--instruction", None, None, "the task of every bag (the instruction topic is then not read)"),
    (
        "--robot-description",
        "",
        "URDF",
        "the robot's URDF, for --tool-loss (default: the --robot profile's, else the bundled vla_arm.urdf)",
    ),
    (
        "--tool-link",
        "",
        None,
        "the tool frame's link, for --tool-loss (default: the --robot profile's tcp_link, else tcp_link)",
    ),
)


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _task_options():
    """(task, options field, its command-line settings) of every registered task's options."""
    return [
        (task, field, field.metadata)
        for task in (get_task(name) for name in TASKS)
        for field in dataclasses.fields(task.options)
        if "flag" in field.metadata
    ]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vla-ros train",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="bags: rosbag2 bag folders, .mcap files, or folders of them (vla-ros collect, vla-ros record, ros2 bag "
        "record)",
    )
    parser.add_argument("--init", default=None, help="model folder to continue training from (fine-tuning)")
    parser.add_argument("--out", required=True, help="model folder to write, e.g. models/vla_cups")
    parser.add_argument(
        "--task",
        choices=TASKS,
        default=TrainConfig.task,
        help="; ".join(f"{name}: {get_task(name).help}" for name in TASKS),
    )
    parser.add_argument(
        "--robot",
        default="",
        metavar="PROFILE",
        help="robot profile the bags were recorded with: a name (fr3) or a YAML file (docs/your_robot.md). The model "
        "commands its joints, --tool-loss uses its URDF and TCP, --task cups renders its views with it, and the model "
        "folder records it for eval, select and demo (default: the bundled arm for --task cups, none for --task none)",
    )
    for option, field, kind, metavar, text in TRAIN_OPTIONS:
        default = getattr(TrainConfig, field)
        help_text = None if text is None else text.format(default=default)
        parser.add_argument(option, type=kind, default=default, metavar=metavar, help=help_text)
    for _, field, meta in _task_options():
        text = meta["help"].format(default=field.default)
        parser.add_argument(meta["flag"], type=meta["type"], default=None, metavar=meta["metavar"], help=text)
    for option, _, _, settings, _ in MODEL_OPTIONS:
        parser.add_argument(option, default=None, **settings)
    parser.add_argument(
        "--checkpoints",
        default="",
        metavar="STEPS",
        help="comma-separated steps after which a complete model is also written to <out>/checkpoints/step_<n>/, e.g. "
        "3600,4200,4800 (candidates for `vla-ros select`)",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    robot = parser.add_argument_group("your own robot's bags (defaults: the simulated arm's names)")
    for option, default, metavar, text in ROBOT_OPTIONS:
        robot.add_argument(option, default=default, metavar=metavar, help=text)
    return parser


def _model_config(args, profile=None):
    """The fresh model's config the options ask for (None: the task's default); raises ValueError for an
    option a fine-tune cannot take (it keeps the config of the model it starts from). ``profile``: the run's
    robot (``train_profile``): a fresh model commands its joints."""
    joints = _names(args.joints)
    overrides = {"joint_names": joints} if joints is not None else {}
    if joints is not None:
        if args.init:
            raise ValueError("--joints and --init: a fine-tune keeps the joints of the model it starts from")
        if args.robot and joints != profile.commanded_joints:
            raise ValueError(
                f"--joints {list(joints)} and --robot {args.robot}: the profile commands "
                f"{list(profile.commanded_joints)} (arm, then gripper); leave --joints out"
            )
        if not args.robot and get_task(args.task).simulated:
            raise ValueError(
                f"--joints and --task {args.task}: the {args.task} task simulates a robot profile's arm; name the "
                "robot with --robot PROFILE (the model commands its joints) instead of --joints"
            )
    elif profile is not None and not args.init:
        overrides["joint_names"] = profile.commanded_joints
    for option, field, kept, _, convert in MODEL_OPTIONS:
        value = getattr(args, _dest(option))
        value = convert(value) if convert is not None else value
        if value is None:
            continue
        if args.init:
            raise ValueError(f"{option} and --init: a fine-tune keeps {kept} of the model it starts from")
        overrides[field] = value
    return task_model_config(args.task).replace(**overrides) if overrides else None


def _train_config(args) -> TrainConfig:
    given = {
        field.name: getattr(args, _dest(meta["flag"]))
        for _, field, meta in _task_options()
        if getattr(args, _dest(meta["flag"])) is not None
    }
    return TrainConfig(
        task=args.task,
        task_options=given,
        checkpoint_steps=_steps(args.checkpoints),
        robot=args.robot,
        robot_description=args.robot_description,
        tool_link=args.tool_link,
        **{field: getattr(args, _dest(option)) for option, field, *_ in TRAIN_OPTIONS},
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from vla_ros.data.bag import BagError
    from vla_ros.data.dataset import Topics
    from vla_ros.data.selection import BagSelection, NoUsableEpisodes

    try:
        selection = BagSelection(
            Topics.for_robot(args.camera_topic, args.joint_states_topic, args.command_topic, args.instruction_topic),
            instruction=args.instruction,
            command_joint_names=_names(args.command_joints) or _names(args.joints),
        )
        tc = _train_config(args)
        profile = train_profile(tc)  # ProfileError (a ValueError): a profile that does not load
        model_config = _model_config(args, profile)
        if args.init or tc.tool_loss_weight:  # refuse before any replay, for the model that will train
            from vla_ros.model.io import load_config

            starting = load_config(args.init) if args.init else model_config or task_model_config(args.task)
            check_robot_joints(starting, profile, f"--init {args.init}" if args.init else "the model")
            tool_points(tc, starting, profile)
    except (ValueError, FileNotFoundError) as exc:  # the options themselves
        print(f"vla-ros train: {exc}", file=sys.stderr)
        return 2
    try:
        report = train(
            args.data, args.out, tc, model_config=model_config, device=args.device, init=args.init, selection=selection
        )
    except (BagError, NoUsableEpisodes) as exc:  # the data: a bad path, a broken file, nothing usable
        print(f"vla-ros train: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary(report, args.out)))
    return 0


def summary(report: dict, out) -> dict:
    """What ``vla-ros train`` prints of its report: the run, the saved model's validation losses (the action
    loss and the task's; null without validation episodes, and ``val_note`` says why), its size."""
    shown = ("task", "steps", "steps_planned", "stopped_by_time_limit", "steps_per_s", "duration_min")
    finals = [
        k
        for k in report
        if k.startswith("final_val_") and k not in ("final_val_loss_last_weights", "final_val_tool_loss")
    ]
    note = ("val_note",) if report["val_note"] else ()
    return {k: report[k] for k in (*shown, *finals, *note, "final_mae_rad", "parameters")} | {"out": out}


if __name__ == "__main__":
    raise SystemExit(main())
