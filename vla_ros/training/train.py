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

import numpy as np

from vla_ros.model.config import ACTION_LOSSES

EXAMPLE = """examples:
  vla-ros collect --episodes 200 --out runs/demos
  vla-ros train --data runs/demos --out runs/vla_cups --task cups --steps 3600
  vla-ros train --data bags/ --out models/my_arm --joints j1,j2,j3,j4,j5,j6,gripper --camera-topic /wrist/image_raw \\
      --command-topic /arm_controller/commands --instruction "put the block in the bin"
    (your own robot's bags: rosbag2 folders or .mcap files; see docs/bags.md)"""

log = logging.getLogger(__name__)

TASKS = ("none", "cups")
# The sim camera's top quarter shows only the wall and the upper arm: cutting it (and a sliver each side)
# gives the table, cups and gripper about 30 % more pixels at the same token count.
SIM_CAMERA_CROP = (0.25, 0.0, 0.06, 0.06)
# The per-frame cup head (ModelConfig.frame_aux_loss_weight): it is what makes the stem find the cup.
FRAME_AUX_LOSS_WEIGHT = 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Args:
    steps: optimiser steps. The schedule is defined on them: linear learning-rate warm-up over
        ``warmup_steps``, cosine decay to lr/10 at ``steps``.
    minutes: wall-clock limit, or None. Only a stop: training ends there even if steps remain (the
        report says so and how many ran); it never shapes the schedule. Counted from the first step
        (replaying bags and rendering views are not training time).
    task: "none": any robot's bags, the policy learns the actions from the bags' topics alone. "cups":
        the sim's cup task adds the named cup's position as an auxiliary target (from the bags'
        episode statuses), rendered still views for the vision stem, and the sim camera's crop.
    span_s / context_s / chunks: sequence shape (see training.data).
    lr / weight_decay / warmup_steps: AdamW (matrices only, see ``param_groups``) with linear warm-up
        and cosine decay to lr/10.
    val_fraction: share of episodes held out for the validation loss.
    threads: torch CPU threads (0 = torch's default). Runs repeat bit for bit with the same seed, data
        and thread count on one machine.
    state_noise_rad / state_noise_rad_s: std of the noise on joint-state inputs (training.data).
    drop_states_p: share of training sequences without joint states (training.data.make_sequence).
    views / view_batch: rendered still views (``training.views``, task "cups") and how many of them join
        each step's loss through the frame head (only with ModelConfig.frame_aux_loss_weight > 0).
    vision_warmup_steps: steps that train the stem on views alone (2 x view_batch each, fast) before
        the main loop, so the Transformer starts from keypoints that already point at the named cup
        (0 = none; never when continuing from ``init``, whose stem is trained).
    grasp_views: share of the views with the gripper over a cup of the view's own layout
        (``training.views.grasp_pose``) instead of a demonstration's arm pose.
    phrasing_swap_p: task "cups": share of training sequences whose instruction is replaced by another
        training phrasing naming the same colour (``sim.tasks.TRAIN_TEMPLATES``), so every layout is
        seen with many wordings of its request, not just the one its episode was recorded with.
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
    robot_description / tool_link: the URDF (empty = the bundled vla_arm.urdf, the sim's arm) and the link
        of the tool frame, for ``tool_loss_weight``.
    end_hold_s: chunk targets past the end of each episode's commands: the last command, held this long
        (``data.targets.chunk_targets``' hold_s; 0 = none, the points carry no loss). For recordings that end
        with the robot at rest on a finished task, so the policy learns to stay there rather than drift.
    still_after_lift_s: task "cups", None = off: chunk targets from this long after each demonstration's
        lift on hold the command of that instant (``training.data.still_after_lift``), so the policy learns
        to hold a lifted cup still instead of imitating the expert's creeping hold.
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
    views: int = 4000
    view_batch: int = 32
    vision_warmup_steps: int = 1000
    grasp_views: float = 0.0
    phrasing_swap_p: float = 0.0
    grasp_focus_p: float = 0.0
    ema_decay: float = 0.0
    image_shift_px: int = 0
    tool_loss_weight: float = 0.0
    robot_description: str = ""
    tool_link: str = "tcp_link"
    end_hold_s: float = 0.0
    still_after_lift_s: float | None = None
    checkpoint_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.steps <= 0 or self.warmup_steps < 0:
            raise ValueError(f"steps ({self.steps}) must be > 0 and warmup_steps ({self.warmup_steps}) >= 0")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be > 0 or None (no time limit), got {self.minutes}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        shares = {
            "grasp_views": self.grasp_views,
            "phrasing_swap_p": self.phrasing_swap_p,
            "grasp_focus_p": self.grasp_focus_p,
        }
        for name, value in shares.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1) (0 = off), got {self.ema_decay}")
        if not (math.isfinite(self.tool_loss_weight) and self.tool_loss_weight >= 0):
            raise ValueError(f"tool_loss_weight must be >= 0 (0 = off), got {self.tool_loss_weight}")
        if not 0.0 <= self.end_hold_s <= 10.0:  # NaN fails too
            raise ValueError(f"end_hold_s must be in [0, 10] seconds (0 = off), got {self.end_hold_s}")
        if self.still_after_lift_s is not None:
            if not 0.0 <= self.still_after_lift_s <= 10.0:  # NaN fails too
                raise ValueError(
                    f"still_after_lift_s must be in [0, 10] seconds (None = off), got {self.still_after_lift_s}"
                )
            if self.task != "cups":
                raise ValueError(
                    "still_after_lift_s needs task 'cups' (the lift is read off the cup's track), got task "
                    f"{self.task!r}"
                )
        if not 0 <= self.image_shift_px <= 8:
            raise ValueError(f"image_shift_px must be in [0, 8] pixels, got {self.image_shift_px}")
        bad = [s for s in self.checkpoint_steps if not 0 < s <= self.steps]
        if bad or len(set(self.checkpoint_steps)) != len(self.checkpoint_steps):
            raise ValueError(
                f"checkpoint_steps must be distinct steps in [1, steps={self.steps}], got {list(self.checkpoint_steps)}"
            )
        if self.views < 0 or self.view_batch < 1 or self.vision_warmup_steps < 0:
            raise ValueError(
                f"views ({self.views}) and vision_warmup_steps ({self.vision_warmup_steps}) must be >= 0, "
                f"view_batch ({self.view_batch}) >= 1"
            )


def task_model_config(task: str):
    """The ModelConfig a fresh model of ``task`` starts from (its normalisation comes from the data)."""
    from vla_ros.model.config import ModelConfig
    from vla_ros.training.data import AUX_DIM

    if task == "cups":
        return ModelConfig(aux_dim=AUX_DIM, crop=SIM_CAMERA_CROP, frame_aux_loss_weight=FRAME_AUX_LOSS_WEIGHT)
    return ModelConfig()


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
    import torch
    from tqdm import tqdm

    from vla_ros.data.selection import BagSelection
    from vla_ros.model.io import load_model, save_model
    from vla_ros.model.model import VLATransformer
    from vla_ros.model.runtime import resolve_device
    from vla_ros.model.sequence import collate
    from vla_ros.tokens import Kind, TokenizerConfig
    from vla_ros.training.data import (
        gripper_events,
        load_episodes,
        mean_image,
        normalisation_stats,
        sample_sequence,
        still_after_lift,
    )

    t_start = time.monotonic()
    if tc.threads:
        torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    cups = tc.task == "cups"
    config = model_config or task_model_config(tc.task)
    model = None
    if init is not None:
        # It keeps the statistics it was trained with (inputs mean the same), and the data is tokenized
        # the way it sees it.
        model = load_model(init)
        config = model.config
    if config.aux_dim and not cups:
        log.warning(
            "the model has auxiliary heads (aux_dim=%d) but task %r gives them no targets; they stay untrained",
            config.aux_dim,
            tc.task,
        )
    tokenizer = TokenizerConfig.from_model_config(config.to_dict())
    selection = selection or BagSelection()
    selection = dataclasses.replace(selection, topics=selection.topics.with_cameras(config.cameras))
    episodes, data_summary = load_episodes(
        data_dir,
        tokenizer,
        config.max_lateness_s,
        progress=progress,
        selection=selection,
        cup_tracks=cups,
        min_frame_interval_s=config.min_frame_interval_s,
    )
    if tc.still_after_lift_s is not None:
        held = [still_after_lift(e, tc.still_after_lift_s) for e in episodes]
        episodes = [e for e, _ in held]
        data_summary["held_still_after_lift"] = int(sum(changed for _, changed in held))
    order = rng.permutation(len(episodes))
    n_val = int(round(tc.val_fraction * len(episodes))) if len(episodes) > 1 else 0
    val_eps = [episodes[i] for i in order[:n_val]]
    train_eps = [episodes[i] for i in order[n_val:]]
    dev = resolve_device(device)
    if model is not None:
        model = model.to(dev)
    else:
        config = config.replace(**normalisation_stats(train_eps, config, tc.end_hold_s))
        model = VLATransformer(config).to(dev)
        model.patch_encoder.mean_image.copy_(torch.from_numpy(mean_image(train_eps)))
    tool = tool_points(tc, config)
    if tool is not None:
        tool = tool.to(dev)
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr)
    val_rng = np.random.default_rng(tc.seed + 1)
    val_batches = [
        collate(
            [sample_sequence(config, val_eps, tc.span_s, tc.context_s, tc.chunks, val_rng, end_hold_s=tc.end_hold_s)]
        )
        for _ in range(tc.val_sequences if val_eps else 0)
    ]

    def validate(net=None, record: bool = True) -> float:
        """Action MSE on the validation sequences of ``net`` (default: the model that is saved, the weight
        average when there is one); its auxiliary losses go to history["val_aux_loss"] etc. when ``record``."""
        net = net if net is not None else (average.module if average is not None else model)
        net.eval()
        with torch.no_grad():
            infos = [net(b.to(dev), tool=tool)[1] for b in val_batches]
        model.train()
        if record:
            for name in ("aux_loss", "frame_aux_loss", "tool_loss"):
                history[f"val_{name}"].append(
                    float(np.mean([i.get(name, np.nan) for i in infos])) if infos else float("nan")
                )
        return float(np.mean([i["loss"] for i in infos])) if infos else float("nan")

    history = {
        "step": [],
        "loss": [],
        "mae": [],
        "aux_loss": [],
        "frame_aux_loss": [],
        "tool_loss": [],
        "val_step": [],
        "val_loss": [],
        "val_aux_loss": [],
        "val_frame_aux_loss": [],
        "val_tool_loss": [],
    }
    views = None
    if cups and model.frame_aux_head is not None and tc.views:
        from vla_ros.training.views import render_views

        n = len(config.joint_names)
        poses = np.concatenate(
            [np.stack([o.data[:n] for o in e.observations if o.kind == Kind.STATE]) for e in train_eps]
        )
        views = render_views(tc.views, tokenizer, poses, seed=tc.seed, progress=progress, grasp_share=tc.grasp_views)
        history["view_loss"] = []
    events = [gripper_events(e) for e in train_eps] if tc.grasp_focus_p > 0 else None
    phrasings = None
    if cups and tc.phrasing_swap_p > 0:
        from vla_ros.sim.tasks import COLORS, TRAIN_TEMPLATES
        from vla_ros.tokens.text import shared_encoder

        encoder = shared_encoder()
        phrasings = {c: [encoder(t.format(color=c)).embeddings for t in TRAIN_TEMPLATES] for c in COLORS}
    deadline = Deadline(tc.minutes)  # the limit counts from here: loading and rendering are not training time
    t_train, cpu_train = time.monotonic(), time.process_time()
    if views is not None and tc.vision_warmup_steps and init is None:  # a fine-tune's stem is trained already
        history["warmup_view_loss"] = vision_warmup(model, views, tc, rng, dev, progress, deadline)
    t_warm, cpu_warm = time.monotonic(), time.process_time()
    # The average starts after the view warm-up: the stem's warm-up weights are a starting point, not a result.
    average = WeightAverage(model, tc.ema_decay) if tc.ema_decay > 0 else None
    bar = tqdm(total=tc.steps, desc="training", unit="step", disable=not progress)
    step, best_val, smooth = 0, float("inf"), None
    checkpoints = []
    # What every saved folder records of where it came from (checkpoints and the final model alike).
    provenance = {"data_sha256": data_summary["sha256"], "seed": str(tc.seed), "git_commit": git_commit()}
    model.train()
    while step < tc.steps and not deadline.passed():
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        noise = (tc.state_noise_rad, tc.state_noise_rad_s)
        batch = collate(
            [
                sample_sequence(
                    config,
                    train_eps,
                    tc.span_s,
                    tc.context_s,
                    tc.chunks,
                    rng,
                    noise,
                    tc.drop_states_p,
                    phrasings,
                    tc.phrasing_swap_p,
                    events,
                    tc.grasp_focus_p,
                    shift_px=tc.image_shift_px,
                    end_hold_s=tc.end_hold_s,
                )
                for _ in range(tc.batch_sequences)
            ]
        ).to(dev)
        loss, info = model(batch, tool=tool)
        if views is not None:
            view_loss = model.view_loss(*view_batch(views, tc.view_batch, rng, dev))
            history["view_loss"].append(float(view_loss.detach()))
            loss = loss + view_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        if average is not None:
            average.update(model)
        smooth = info["loss"] if smooth is None else 0.98 * smooth + 0.02 * info["loss"]
        history["step"].append(step)
        history["loss"].append(info["loss"])
        history["mae"].append(info["mae"])
        history["aux_loss"].append(info.get("aux_loss", float("nan")))
        history["frame_aux_loss"].append(info.get("frame_aux_loss", float("nan")))
        history["tool_loss"].append(info.get("tool_loss", float("nan")))
        step += 1
        bar.update(1)
        if step % tc.val_every == 0 and val_batches:
            v = validate()
            history["val_step"].append(step)
            history["val_loss"].append(v)
            if v < best_val:
                best_val = v
            bar.set_postfix(loss=f"{smooth:.4f}", val=f"{v:.4f}")
        elif step % 10 == 0:
            bar.set_postfix(loss=f"{smooth:.4f}")
        if step in tc.checkpoint_steps:
            # the validation loss of these weights, computed once: a checkpoint on a validation step reuses it
            val = history["val_loss"][-1] if history["val_step"][-1:] == [step] else validate(record=False)
            checkpoints.append(Path(out) / CHECKPOINTS_DIR / f"step_{step:05d}")
            save_checkpoint(
                average.module if average is not None else model,
                checkpoints[-1],
                step,
                tc,
                val,
                (time.monotonic() - t_start) / 60.0,
                provenance,
            )
    bar.close()
    t_end, cpu_end = time.monotonic(), time.process_time()
    warmup_steps_run = len(history.get("warmup_view_loss", []))
    if deadline.hit:
        log.warning(
            "stopped by the %.1f-minute limit after %d of %d warm-up steps and %d of %d steps: the learning "
            "rate had not finished its schedule",
            tc.minutes,
            warmup_steps_run,
            tc.vision_warmup_steps if views is not None else 0,
            step,
            tc.steps,
        )
    final_val = validate() if val_batches else float("nan")
    # With an average, the last trained weights' loss too: what the average changed, on the same sequences.
    final_val_raw = validate(model, record=False) if val_batches and average is not None else None
    saved = average.module if average is not None else model
    duration_min = (time.monotonic() - t_start) / 60.0
    out = Path(out)
    report = {
        "data": {
            **data_summary,
            "train_episodes": len(train_eps),
            "val_episodes": len(val_eps),
            "path": str(data_dir) if isinstance(data_dir, (str, Path)) else [str(d) for d in data_dir],
        },
        "init": str(init) if init is not None else None,
        "task": tc.task,
        "train_config": dataclasses.asdict(tc),
        "steps": step,
        "steps_planned": tc.steps,
        "stopped_by_time_limit": deadline.hit,
        "duration_min": round(duration_min, 2),
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "vision_warmup_steps": warmup_steps_run,
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
        "vision_warmup_steps_per_s": round(warmup_steps_run / max(t_warm - t_train, 1e-9), 3)
        if warmup_steps_run
        else None,
        "final_train_loss_smoothed": smooth,
        "final_val_loss": final_val,
        "final_val_loss_last_weights": final_val_raw,
        "final_val_aux_loss": history["val_aux_loss"][-1] if history["val_aux_loss"] else None,
        "final_val_frame_aux_loss": history["val_frame_aux_loss"][-1] if history["val_frame_aux_loss"] else None,
        "final_val_tool_loss": history["val_tool_loss"][-1] if tool is not None and history["val_tool_loss"] else None,
        "best_val_loss": best_val if best_val < float("inf") else None,
        "final_mae_rad": float(np.mean(history["mae"][-100:])) if history["mae"] else None,
        "parameters": model.num_parameters(),
        "git_commit": provenance["git_commit"],
        "torch": torch.__version__,
        "checkpoints": [str(c) for c in checkpoints],
    }
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
    plot_losses(history, out / "loss.png")
    return report


CHECKPOINTS_DIR = "checkpoints"


def save_checkpoint(
    net, folder: Path, step: int, tc: TrainConfig, val_loss: float, minutes: float, provenance: dict
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
    log.info("checkpoint at step %d: %s (validation loss %.4f)", step, folder, val_loss)


def tool_points(tc: TrainConfig, config):
    """The tool-position loss term of ``tc`` for a model of ``config`` (None when off). Raises ValueError
    for a state-relative model (its targets are offsets, not joint positions) or a tool the URDF cannot
    reach through the model's joints."""
    if not tc.tool_loss_weight:
        return None
    if config.relative_actions:
        raise ValueError(
            "tool_loss_weight needs joint-position chunks; a state-relative model's (relative_actions) "
            "targets are offsets"
        )
    from vla_ros.sim.scene import default_urdf_path
    from vla_ros.training.tool_points import ToolPoints

    urdf = Path(tc.robot_description) if tc.robot_description else default_urdf_path()
    if not urdf.is_file():
        raise ValueError(f"robot description {urdf} does not exist")
    return ToolPoints(urdf, config.joint_names, tc.tool_link, weight=tc.tool_loss_weight)


def view_batch(views, n: int, rng: np.random.Generator, dev):
    """n random still views as (images, instruction vectors, scaled named-cup targets) tensors on dev."""
    import torch

    from vla_ros.training.data import scale_aux

    frames, instructions, cups = views.sample(n, rng)
    return (
        torch.from_numpy(frames).to(dev),
        torch.from_numpy(instructions).to(dev),
        torch.from_numpy(scale_aux(cups)).to(dev),
    )


def vision_warmup(
    model, views, tc: TrainConfig, rng: np.random.Generator, dev, progress: bool, deadline: Deadline | None = None
) -> list[float]:
    """Train the stem and the frame head alone on still views for ``tc.vision_warmup_steps`` steps at a
    constant ``tc.lr`` (fewer if ``deadline`` passes first); returns the loss of every step."""
    import torch
    from tqdm import tqdm

    params = [
        *model.patch_encoder.parameters(),
        *model.frame_aux_head.parameters(),
        *model.instruction_norm.parameters(),
    ]
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay, params), lr=tc.lr)
    losses = []
    bar = tqdm(total=tc.vision_warmup_steps, desc="vision warm-up", unit="step", disable=not progress)
    model.train()
    while len(losses) < tc.vision_warmup_steps and not (deadline is not None and deadline.passed()):
        loss = model.view_loss(*view_batch(views, 2 * tc.view_batch, rng, dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        bar.update(1)
        if len(losses) % 20 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
    bar.close()
    return losses


def plot_losses(history: dict, path: Path) -> None:
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
    view = np.asarray(history.get("view_loss", []))
    if len(view) > k:
        ax.plot(
            steps[k - 1 : len(view)],
            np.convolve(view, np.ones(k) / k, mode="valid"),
            color="C1",
            lw=1.0,
            label="train, named cup on rendered views",
        )
    if history["val_loss"]:
        ax.plot(history["val_step"], history["val_loss"], "o-", color="C3", ms=3, label="validation")
        aux = history.get("val_aux_loss", [])[: len(history["val_step"])]
        if aux and np.isfinite(aux).any():
            ax.plot(history["val_step"], aux, "s--", color="C2", ms=3, label="validation, named cup position (aux)")
        frame_aux = history.get("val_frame_aux_loss", [])[: len(history["val_step"])]
        if frame_aux and np.isfinite(frame_aux).any():
            ax.plot(
                history["val_step"],
                frame_aux,
                "^:",
                color="C4",
                ms=3,
                label="validation, named cup from the frame's keypoints",
            )
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


def main(argv: list[str] | None = None) -> int:
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
        help="bags: rosbag2 bag folders, .mcap files, or folders of them (vla-ros collect, vla-ros record, ros2 "
        "bag record)",
    )
    parser.add_argument("--init", default=None, help="model folder to continue training from (fine-tuning)")
    parser.add_argument("--out", required=True, help="model folder to write, e.g. models/vla_cups")
    parser.add_argument(
        "--steps",
        type=int,
        default=TrainConfig.steps,
        help=f"optimiser steps; the learning-rate schedule is defined on them (default {TrainConfig.steps})",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=TrainConfig.warmup_steps,
        help=f"linear learning-rate warm-up steps (default {TrainConfig.warmup_steps})",
    )
    parser.add_argument(
        "--vision-warmup-steps",
        type=int,
        default=TrainConfig.vision_warmup_steps,
        help=f"task cups: steps on rendered views alone first (default {TrainConfig.vision_warmup_steps})",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="wall-clock limit: stop there even if steps remain (the report says so); default none",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default=TrainConfig.task,
        help="none: actions from the bags' topics alone (any robot); cups: the sim's cup task adds the "
        "named cup's position as an auxiliary target, rendered views and the sim camera's crop",
    )
    parser.add_argument(
        "--grasp-views",
        type=float,
        default=TrainConfig.grasp_views,
        help="task cups: share of the rendered views with the gripper over a cup of the view's layout "
        f"(default {TrainConfig.grasp_views})",
    )
    parser.add_argument(
        "--phrasing-swap",
        type=float,
        default=TrainConfig.phrasing_swap_p,
        help="task cups: share of training sequences whose instruction is another training phrasing of "
        f"the same request (default {TrainConfig.phrasing_swap_p})",
    )
    parser.add_argument(
        "--grasp-focus",
        type=float,
        default=TrainConfig.grasp_focus_p,
        metavar="P",
        help="share of training sequences that end within 0.5 s of the last joint (the gripper) being "
        f"commanded shut or open (default {TrainConfig.grasp_focus_p})",
    )
    parser.add_argument(
        "--cameras",
        default=None,
        help="camera streams a fresh model reads, comma-separated, main view first (default: camera); "
        "e.g. camera,wrist_camera: the others are read from /<name>/image_raw",
    )
    parser.add_argument(
        "--max-frame-rate",
        type=float,
        default=None,
        help="frames per second per camera a fresh model reads (default: every frame); e.g. 15 with "
        "two 30 Hz cameras: the tokens, and the step cost, of one camera at 30 Hz",
    )
    parser.add_argument(
        "--action-loss",
        choices=ACTION_LOSSES,
        default=None,
        help="loss on the action points (ModelConfig.action_loss; default mse)",
    )
    parser.add_argument(
        "--relative-actions",
        action="store_true",
        help="a fresh model's chunks are offsets from the newest measured joint positions, not positions "
        "(ModelConfig.relative_actions; default: positions)",
    )
    parser.add_argument(
        "--pin-first-frame",
        action="store_true",
        help="a fresh model keeps the main camera's first frame of each episode beside its window "
        "(ModelConfig.pin_first_frame; default: the window alone)",
    )
    parser.add_argument(
        "--ema",
        type=float,
        default=TrainConfig.ema_decay,
        metavar="DECAY",
        help="save an exponential moving average of the weights with this decay per step, e.g. 0.998 "
        f"(default {TrainConfig.ema_decay}: off, the last weights)",
    )
    parser.add_argument(
        "--image-shift",
        type=int,
        default=TrainConfig.image_shift_px,
        metavar="PX",
        help="shift each training sequence's frames by a random offset of up to PX pixels each way "
        f"(augmentation; default {TrainConfig.image_shift_px}: off)",
    )
    parser.add_argument(
        "--tool-loss",
        type=float,
        default=TrainConfig.tool_loss_weight,
        metavar="W",
        help="also weigh where each chunk point puts the tool (forward kinematics of the URDF, squared "
        f"distance in units of 5 cm) with weight W, e.g. 0.1 (default {TrainConfig.tool_loss_weight}: off)",
    )
    parser.add_argument(
        "--end-hold",
        type=float,
        default=TrainConfig.end_hold_s,
        metavar="S",
        help="chunk targets past the end of each recording: its last command, held S seconds "
        "(0 = none: those points carry no loss; TrainConfig.end_hold_s)",
    )
    parser.add_argument(
        "--still-after-lift",
        type=float,
        default=None,
        metavar="S",
        help="task cups: chunk targets from S seconds after each demonstration's lift on hold the command "
        "of that instant, so the policy holds a lifted cup still (default: off)",
    )
    parser.add_argument(
        "--checkpoints",
        default="",
        metavar="STEPS",
        help="comma-separated steps after which a complete model is also written to <out>/checkpoints/step_<n>/, "
        "e.g. 3600,4200,4800 (candidates for `vla-ros select`)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    robot = parser.add_argument_group("your own robot's bags (defaults: the simulated arm's names)")
    robot.add_argument(
        "--joints",
        default=None,
        help="joint names to learn, in order (comma-separated); the joint states must name them all",
    )
    robot.add_argument(
        "--command-joints", default=None, help="joint order of the Float64MultiArray commands (default: --joints)"
    )
    robot.add_argument(
        "--camera-topic", default=None, help="sensor_msgs/Image or CompressedImage topic (default /camera/image_raw)"
    )
    robot.add_argument(
        "--joint-states-topic", default=None, help="sensor_msgs/JointState topic (default /joint_states)"
    )
    robot.add_argument(
        "--command-topic",
        default=None,
        help="std_msgs/Float64MultiArray commands, the targets (default /forward_position_controller/commands)",
    )
    robot.add_argument(
        "--instruction-topic", default=None, help="std_msgs/String instruction topic (default /vla/instruction)"
    )
    robot.add_argument(
        "--instruction", default=None, help="the task of every bag (the instruction topic is then not read)"
    )
    robot.add_argument(
        "--robot-description",
        default="",
        metavar="URDF",
        help="the robot's URDF, for --tool-loss (default: the bundled vla_arm.urdf)",
    )
    robot.add_argument(
        "--tool-link",
        default=TrainConfig.tool_link,
        help=f"the tool frame's link, for --tool-loss (default {TrainConfig.tool_link})",
    )
    args = parser.parse_args(argv)
    from vla_ros.data.bag import BagError
    from vla_ros.data.dataset import Topics
    from vla_ros.data.selection import BagSelection, NoUsableEpisodes

    joints = _names(args.joints)
    try:
        selection = BagSelection(
            Topics.for_robot(args.camera_topic, args.joint_states_topic, args.command_topic, args.instruction_topic),
            instruction=args.instruction,
            command_joint_names=_names(args.command_joints) or joints,
        )
        model_config = None
        if joints is not None:
            if args.init:
                raise ValueError("--joints and --init: a fine-tune keeps the joints of the model it starts from")
            if args.task != "none":
                raise ValueError(f"--joints and --task {args.task}: the {args.task} task is the simulated arm's")
            model_config = task_model_config("none").replace(joint_names=joints)
        cameras = _names(args.cameras)
        if cameras is not None:
            if args.init:
                raise ValueError("--cameras and --init: a fine-tune keeps the cameras of the model it starts from")
            model_config = (model_config or task_model_config(args.task)).replace(cameras=cameras)
        if args.max_frame_rate is not None:
            if args.init:
                raise ValueError(
                    "--max-frame-rate and --init: a fine-tune keeps the frame rate of the model it starts from"
                )
            model_config = (model_config or task_model_config(args.task)).replace(max_frame_rate_hz=args.max_frame_rate)
        if args.relative_actions:
            if args.init:
                raise ValueError(
                    "--relative-actions and --init: a fine-tune keeps the action frame of the model it starts from"
                )
            model_config = (model_config or task_model_config(args.task)).replace(relative_actions=True)
        if args.pin_first_frame:
            if args.init:
                raise ValueError(
                    "--pin-first-frame and --init: a fine-tune keeps the inputs of the model it starts from"
                )
            model_config = (model_config or task_model_config(args.task)).replace(pin_first_frame=True)
        if args.action_loss is not None:
            if args.init:
                raise ValueError("--action-loss and --init: a fine-tune keeps the loss of the model it starts from")
            model_config = (model_config or task_model_config(args.task)).replace(action_loss=args.action_loss)
        tc = TrainConfig(
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            vision_warmup_steps=args.vision_warmup_steps,
            minutes=args.minutes,
            task=args.task,
            seed=args.seed,
            threads=args.threads,
            lr=args.lr,
            grasp_views=args.grasp_views,
            phrasing_swap_p=args.phrasing_swap,
            grasp_focus_p=args.grasp_focus,
            ema_decay=args.ema,
            image_shift_px=args.image_shift,
            checkpoint_steps=_steps(args.checkpoints),
            end_hold_s=args.end_hold,
            still_after_lift_s=args.still_after_lift,
            tool_loss_weight=args.tool_loss,
            robot_description=args.robot_description,
            tool_link=args.tool_link,
        )
        if tc.tool_loss_weight:  # refuse a bad URDF or tool link before any replay, for the model that will train
            from vla_ros.model.io import load_config

            tool_points(tc, load_config(args.init) if args.init else model_config or task_model_config(args.task))
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
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "task",
                    "steps",
                    "steps_planned",
                    "stopped_by_time_limit",
                    "steps_per_s",
                    "duration_min",
                    "final_val_loss",
                    "final_val_aux_loss",
                    "final_val_frame_aux_loss",
                    "final_mae_rad",
                    "parameters",
                )
            }
            | {"out": args.out}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
