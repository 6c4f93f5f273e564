"""The sim's cup task ("pick up the <colour> cup"), a plug-in of ``vla_ros.tasks``: ``--task cups``.

What it adds to the generic model and trainer:

* the named cup's position as an auxiliary target, read from the bags' episode statuses (``cup_track``),
  scaled to about unit range over the sim's cup region (``scale_aux``);
* two heads that predict it (``heads``): ``aux_head`` on the action tokens (what the Transformer believes
  from its whole window) and ``frame_aux_head`` on each frame's instruction-conditioned keypoints (what
  makes the stem find the cup; ``ModelConfig.frame_aux_loss_weight``), and their losses (``losses``);
* rendered still views (``tasks.cup_views``) that train the frame head beside every step (``view_loss``)
  and alone first (``vision_warmup``);
* other training phrasings of the same request (``phrasing_swap_p``), targets held still after the lift
  (``still_after_lift``), and the sim camera's crop.

A model config with auxiliary targets (``aux_dim > 0``) is this task's: the shipped model's config.json
(written before tasks had names) loads with these heads under the names it was saved with.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from vla_ros import reasons
from vla_ros.tasks import Task, TaskTraining, register

# The sim camera's top quarter shows only the wall and the upper arm: cutting it (and a sliver each side)
# gives the table, cups and gripper about 30 % more pixels at the same token count.
SIM_CAMERA_CROP = (0.25, 0.0, 0.06, 0.06)
# The per-frame cup head (ModelConfig.frame_aux_loss_weight): it is what makes the stem find the cup.
FRAME_AUX_LOSS_WEIGHT = 1.0

# Auxiliary target: the named cup's position, scaled to about unit range over the sim's cup region.
AUX_CENTER_M = np.array([0.425, 0.0, 0.045])
AUX_SCALE_M = np.array([0.125, 0.22, 0.05])
AUX_DIM = 3


# Words that make a cup request something else (``ground_words``): a negation, or more than one cup.
NEGATION_WORDS = frozenset(
    {"not", "don't", "dont", "never", "no", "nothing", "none", "neither", "nor", "without", "except", "avoid"}
)
MANY_WORDS = frozenset(
    {"both", "all", "every", "each", "two", "three", "several", "many", "cups", "mugs", "ones", "them"}
)
# Colour words no cup of the scene has (common English colour names); the scene's are ``sim.tasks.COLORS``.
OTHER_COLOR_WORDS = frozenset(
    "yellow orange purple violet pink black white grey gray brown cyan magenta silver gold golden beige turquoise "
    "teal navy maroon indigo lime olive crimson scarlet lavender tan".split()
)


def instruction_words(instruction: str) -> list[str]:
    """Lower-case words of an instruction (letters and apostrophes)."""
    return re.findall(r"[a-z']+", str(instruction).lower().replace("’", "'"))


def cup_colors_named(words: list[str]) -> list[str]:
    """The scene's cup colours among ``words``, each once, in the order they come."""
    from vla_ros.sim.tasks import COLORS

    return list(dict.fromkeys(w for w in words if w in COLORS))


def named_color(instruction: str) -> str | None:
    """The one cup colour an instruction names, or None (none or several)."""
    named = cup_colors_named(instruction_words(instruction))
    return named[0] if len(named) == 1 else None


def ground_cup_words(text: str) -> tuple[str | None, str, str]:
    """The cup task's word rules (``Task.ground_words``): no negation, no colour without a cup in the scene,
    one cup only, and its colour named."""
    from vla_ros.sim.tasks import COLORS

    words = instruction_words(text)
    named = cup_colors_named(words)
    target = named[0] if len(named) == 1 else None
    negation = [w for w in words if w in NEGATION_WORDS or w.endswith("n't")]
    if negation:
        return (
            target,
            reasons.INSTRUCTION_NEGATED,
            f"a negation ({', '.join(dict.fromkeys(negation))}): say what to lift",
        )
    other = [w for w in dict.fromkeys(words) if w in OTHER_COLOR_WORDS]
    if other:
        return (
            target,
            reasons.INSTRUCTION_UNKNOWN_TARGET,
            (f"no cup is {' or '.join(other)} (the cups are {', '.join(COLORS)})"),
        )
    many = [w for w in dict.fromkeys(words) if w in MANY_WORDS]
    if len(named) > 1 or many:
        what = ", ".join(named) if len(named) > 1 else ", ".join(many)
        return target, reasons.INSTRUCTION_MANY_TARGETS, f"more than one cup ({what}): name one"
    if target is None:
        return None, reasons.INSTRUCTION_NO_TARGET, f"no cup colour named (the cups are {', '.join(COLORS)})"
    return target, "", ""


def cup_track(ep) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """Times and positions of the cup the instruction names, from a replayed episode's statuses."""
    color = named_color(ep.instruction.text) if ep.instruction is not None else None
    rows = [(t, st["cups"][color]) for t, st in ep.statuses if color and color in st.get("cups", {})]
    if len(rows) < 2:
        return None, None
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows], dtype=np.float64)


def scale_aux(xyz_m: np.ndarray) -> np.ndarray:
    """Cup position(s) (..., 3) in metres -> the auxiliary target's scaled units (float32)."""
    return ((np.asarray(xyz_m) - AUX_CENTER_M) / AUX_SCALE_M).astype(np.float32)


def unscale_aux(aux: np.ndarray) -> np.ndarray:
    """The inverse of ``scale_aux``: an auxiliary head's output (..., 3) -> metres."""
    return np.asarray(aux) * AUX_SCALE_M + AUX_CENTER_M


def aux_target(ep, t_s: float) -> np.ndarray | None:
    """(3,) scaled position of the named cup at ``t_s`` (``training.data.EpisodeData``'s track), or None
    without a track."""
    if ep.track_t_s is None:
        return None
    return scale_aux(np.array([np.interp(t_s, ep.track_t_s, ep.track[:, k]) for k in range(3)]))


def still_after_lift(ep, after_s: float):
    """``--still-after-lift``: ``ep`` (``training.data.EpisodeData``) with its target track held, from
    ``after_s`` seconds past the lift on, at the value it had then (the times stay, so gaps and the
    recording's end stay as they were). The lift is the first instant the named cup has risen
    ``LIFT_HEIGHT_M`` (the sim's success rule) above where its track starts. Returns (episode, changed); an
    episode without a cup track or a lift, or that ends before ``after_s`` past it, comes back unchanged.

    Why: the expert's hold aims at the held cup, which moves with the hand, so its last commands creep after
    an off-centre cup and a policy learns to carry the cup off (docs/training.md, "After the lift"). Held
    targets say "stay" from there, while the inputs and every target before stay the demonstration's own."""
    from vla_ros.sim.arm_sim import LIFT_HEIGHT_M  # mujoco: imported where the cup task trains

    if ep.track_t_s is None:
        return ep, False
    risen = np.flatnonzero(ep.track[:, 2] >= ep.track[0, 2] + LIFT_HEIGHT_M)
    if not risen.size:
        return ep, False
    t_hold = ep.track_t_s[risen[0]] + after_s
    later = ep.target_t_s > t_hold
    if not later.any():
        return ep, False
    held = np.array(
        [np.interp(t_hold, ep.target_t_s, ep.target_positions[:, j]) for j in range(ep.target_positions.shape[1])]
    )
    positions = ep.target_positions.copy()
    positions[later] = held
    return dataclasses.replace(ep, target_positions=positions), True


def _share(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _option(default, flag: str, help: str, metavar: str | None = None, type=float):  # noqa: A002
    """A field of ``CupsOptions`` with its command-line option (``training.train.main`` reads them)."""
    return dataclasses.field(default=default, metadata={"flag": flag, "help": help, "metavar": metavar, "type": type})


@dataclasses.dataclass(frozen=True)
class CupsOptions:
    """The cup task's training knobs (``TrainConfig.task_options``).

    views / view_batch: rendered still views (``tasks.cup_views``) and how many of them join each step's loss
        through the frame head (only with ModelConfig.frame_aux_loss_weight > 0).
    vision_warmup_steps: steps that train the stem on views alone (2 x view_batch each, fast) before the main
        loop, so the Transformer starts from keypoints that already point at the named cup (0 = none; never
        when continuing from ``init``, whose stem is trained).
    grasp_views: share of the views with the gripper over a cup of the view's own layout
        (``tasks.cup_views.grasp_pose``) instead of a demonstration's arm pose.
    phrasing_swap_p: share of training sequences whose instruction is replaced by another training phrasing
        naming the same colour (``sim.tasks.PHRASING_TEMPLATES``), so every layout is seen with many wordings of
        its request, not just the one its episode was recorded with.
    still_after_lift_s: None = off: chunk targets from this long after each demonstration's lift on hold the
        command of that instant (``still_after_lift``), so the policy learns to hold a lifted cup still
        instead of imitating the expert's creeping hold.
    """

    views: int = _option(
        4000, "--views", "task cups: rendered still views for the vision stem (default {default})", type=int
    )
    view_batch: int = 32
    vision_warmup_steps: int = _option(
        1000, "--vision-warmup-steps", "task cups: steps on rendered views alone first (default {default})", type=int
    )
    grasp_views: float = _option(
        0.0,
        "--grasp-views",
        "task cups: share of the rendered views with the gripper over a cup of the view's layout (default {default})",
    )
    phrasing_swap_p: float = _option(
        0.0,
        "--phrasing-swap",
        "task cups: share of training sequences whose instruction is another training phrasing of the same request "
        "(default {default})",
    )
    still_after_lift_s: float | None = _option(
        None,
        "--still-after-lift",
        "task cups: chunk targets from S seconds after each demonstration's lift on hold the command of that instant, "
        "so the policy holds a lifted cup still (default: off)",
        metavar="S",
    )

    def __post_init__(self) -> None:
        _share(self.grasp_views, "grasp_views")
        _share(self.phrasing_swap_p, "phrasing_swap_p")
        if self.still_after_lift_s is not None and not 0.0 <= self.still_after_lift_s <= 10.0:  # NaN fails too
            raise ValueError(
                f"still_after_lift_s must be in [0, 10] seconds (None = off), got {self.still_after_lift_s}"
            )
        if self.views < 0 or self.view_batch < 1 or self.vision_warmup_steps < 0:
            raise ValueError(
                f"views ({self.views}) and vision_warmup_steps ({self.vision_warmup_steps}) must be >= 0, "
                f"view_batch ({self.view_batch}) >= 1"
            )


def frame_head_mse(model, keypoints, target):
    return (model.frame_aux_head(keypoints) - target).pow(2).mean()


def view_loss(model, images, instruction, target):
    """The frame head's loss on still views (``tasks.cup_views``): images (F, 3, H, W), instruction (F, 384)
    vectors, target (F, aux_dim) scaled named-cup positions; weighted like the frame loss."""
    if getattr(model, "frame_aux_head", None) is None:
        raise ValueError("view_loss needs a frame head: ModelConfig(aux_dim > 0, frame_aux_loss_weight > 0)")
    _, keypoints = model.patch_encoder.encode(images, model.instruction_norm(instruction))
    return model.config.frame_aux_loss_weight * frame_head_mse(model, keypoints, target)


def view_batch(views, n: int, rng: np.random.Generator, dev):
    """n random still views as (images, instruction vectors, scaled named-cup targets) tensors on dev."""
    import torch

    frames, instructions, cups = views.sample(n, rng)
    return (
        torch.from_numpy(frames).to(dev),
        torch.from_numpy(instructions).to(dev),
        torch.from_numpy(scale_aux(cups)).to(dev),
    )


def vision_warmup(
    model, views, options: CupsOptions, lr: float, weight_decay: float, rng, dev, progress: bool, deadline=None
) -> list[float]:
    """Train the stem and the frame head alone on still views for ``options.vision_warmup_steps`` steps at a
    constant ``lr`` (fewer if ``deadline`` passes first); returns the loss of every step."""
    import torch
    from tqdm import tqdm

    from vla_ros.training.train import param_groups

    params = [
        *model.patch_encoder.parameters(),
        *model.frame_aux_head.parameters(),
        *model.instruction_norm.parameters(),
    ]
    opt = torch.optim.AdamW(param_groups(model, weight_decay, params), lr=lr)
    losses = []
    bar = tqdm(total=options.vision_warmup_steps, desc="vision warm-up", unit="step", disable=not progress)
    model.train()
    while len(losses) < options.vision_warmup_steps and not (deadline is not None and deadline.passed()):
        loss = view_loss(model, *view_batch(views, 2 * options.view_batch, rng, dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        bar.update(1)
        if len(losses) % 20 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
    bar.close()
    return losses


class CupsTraining(TaskTraining):
    """The cup task's part of a run: held targets after the lift, phrasing swaps, rendered views (a warm-up
    on them, then a view loss beside every step) of the run's robot (a profile; None: the bundled arm)."""

    warmup_loss_name = "warmup_view_loss"

    def __init__(self, options: CupsOptions, config, tokenizer, seed, fine_tune, lr, weight_decay, robot=None) -> None:
        self.options, self.config, self.tokenizer, self.seed = options, config, tokenizer, seed
        self.robot = robot
        self.fine_tune, self.lr, self.weight_decay = fine_tune, lr, weight_decay
        self.phrasing_swap_p = options.phrasing_swap_p
        self.views = None

    def episodes(self, episodes: list, summary: dict) -> list:
        summary["episodes_with_cup_track"] = int(sum(e.track_t_s is not None for e in episodes))
        if self.options.still_after_lift_s is None:
            return episodes
        held = [still_after_lift(e, self.options.still_after_lift_s) for e in episodes]
        summary["held_still_after_lift"] = int(sum(changed for _, changed in held))
        return [e for e, _ in held]

    def prepare(self, model, train_episodes: list, rng, device, progress: bool) -> None:
        if getattr(model, "frame_aux_head", None) is None or not self.options.views:
            return
        from vla_ros.tasks.cup_views import render_views
        from vla_ros.tokens import Kind

        n = len(self.config.joint_names)
        poses = np.concatenate(
            [np.stack([o.data[:n] for o in e.observations if o.kind == Kind.STATE]) for e in train_episodes]
        )
        self.views = render_views(
            self.options.views,
            self.tokenizer,
            poses,
            seed=self.seed,
            progress=progress,
            grasp_share=self.options.grasp_views,
            profile=self.robot,
        )
        self.warmup_planned = self.options.vision_warmup_steps
        self.step_loss_name = "view_loss"

    def phrasings(self):
        if self.options.phrasing_swap_p <= 0:
            return None
        from vla_ros.sim.tasks import COLORS, PHRASING_TEMPLATES
        from vla_ros.tokens.text import shared_encoder

        encoder = shared_encoder()
        pools = {c: [encoder(t.format(color=c)).embeddings for t in PHRASING_TEMPLATES] for c in COLORS}
        return lambda instruction: pools.get(named_color(instruction) or "", [])

    def warmup(self, model, rng, device, progress: bool, deadline) -> list[float] | None:
        if self.views is None or not self.warmup_planned or self.fine_tune:  # a fine-tune's stem is trained
            return None
        return vision_warmup(
            model, self.views, self.options, self.lr, self.weight_decay, rng, device, progress, deadline
        )

    def step_loss(self, model, rng, device):
        return view_loss(model, *view_batch(self.views, self.options.view_batch, rng, device))


class Cups(Task):
    name = "cups"
    help = (
        "the sim's cup task adds the named cup's position as an auxiliary target, rendered views and the sim camera's "
        "crop"
    )
    options = CupsOptions
    loss_names = ("aux_loss", "frame_aux_loss")
    loss_labels = {
        "view_loss": "train, named cup on rendered views",
        "val_aux_loss": "validation, named cup position (aux)",
        "val_frame_aux_loss": "validation, named cup from the frame's keypoints",
    }
    option_reasons = {"still_after_lift_s": "the lift is read off the cup's track"}
    simulated = True

    def claims(self, config) -> bool:
        return config.aux_dim > 0

    def ground_words(self, text: str) -> tuple[str | None, str, str]:
        return ground_cup_words(text)

    def grounding_text(self, text: str) -> str:
        from vla_ros.sim.tasks import COLORS

        return re.sub(r"\b(" + "|".join(COLORS) + r")\b", COLORS[0], super().grounding_text(text))

    def canonical_instruction(self, target: str | None) -> str | None:
        from vla_ros.sim.tasks import TRAIN_TEMPLATES

        return None if target is None else TRAIN_TEMPLATES[0].format(color=target)

    def grounding_pools(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        from vla_ros.sim.tasks import COLORS, refusal_training_texts, request_training_texts

        def fill(templates):
            return tuple(t.format(color=COLORS[0]) for t in templates)

        return fill(request_training_texts()), fill(refusal_training_texts())

    def model_config(self):
        from vla_ros.model.config import ModelConfig

        return ModelConfig(aux_dim=AUX_DIM, crop=SIM_CAMERA_CROP, frame_aux_loss_weight=FRAME_AUX_LOSS_WEIGHT)

    def heads(self, config) -> dict:
        import torch.nn as nn

        D = config.hidden_size
        frame = None
        if config.frame_aux_loss_weight > 0:  # keypoints -> named cup (training only)
            c2 = config.stem_channels[1]
            frame = nn.Sequential(nn.Linear(2 * c2, D), nn.GELU(), nn.Linear(D, config.aux_dim))
        return {"aux_head": nn.Linear(D, config.aux_dim), "frame_aux_head": frame}

    def losses(self, model, out, batch) -> list:
        terms = []
        if batch.aux is not None and bool(batch.aux_valid.any()):
            aux_err = model.aux_head(out.hidden[batch.aux_valid]) - batch.aux[batch.aux_valid]
            terms.append(("aux_loss", model.config.aux_loss_weight, aux_err.pow(2).mean()))
        if model.frame_aux_head is not None and batch.frame_aux is not None and bool(batch.frame_aux_valid.any()):
            sel = batch.frame_aux_valid
            frame_loss = frame_head_mse(model, out.keypoints[sel], batch.frame_aux[sel])
            terms.append(("frame_aux_loss", model.config.frame_aux_loss_weight, frame_loss))
        return terms

    def episode_track(self, episode):
        return cup_track(episode)

    def chunk_target(self, config, episode, t_s: float):
        return aux_target(episode, t_s)

    def frame_targets(self, config, episode, observations: list):
        if config.frame_aux_loss_weight <= 0:
            return None
        from vla_ros.tokens import Kind

        return [aux_target(episode, o.t_s) if o.kind == Kind.IMAGE else None for o in observations]

    def training(self, options, config, tokenizer, seed, fine_tune, lr, weight_decay, robot=None) -> CupsTraining:
        return CupsTraining(options, config, tokenizer, seed, fine_tune, lr, weight_decay, robot)


register(Cups())
