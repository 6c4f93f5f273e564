"""``vla-ros train``: train the policy from MCAP demonstrations (CPU by default, CUDA when available).

Reads every bag through the same token stream the node uses, trains on sequences built with the exact
streaming mask (``training.data``), and writes ``config.json`` + ``model.safetensors`` + ``model.onnx``
into ``--out`` with a report: loss curves (PNG), the data summary and its hash, seeds, duration, git commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

EXAMPLE = """examples:
  vla-ros collect --episodes 200 --out runs/demos && vla-ros train --data runs/demos --out models/vla_cups --minutes 40
  vla-ros train --data bags/ --out models/my_arm --joints j1,j2,j3,j4,j5,j6,gripper --camera-topic /wrist/image_raw \\
      --command-topic /arm_controller/commands --instruction "put the block in the bin"
    (your own robot's bags: rosbag2 folders or .mcap files; see docs/bags.md)"""


# The sim camera's top quarter shows only the wall and the upper arm: cutting it (and a sliver each side)
# gives the table, cups and gripper about 30 % more pixels at the same token count.
SIM_CAMERA_CROP = (0.25, 0.0, 0.06, 0.06)
# The per-frame cup head (ModelConfig.frame_aux_loss_weight): it is what makes the stem find the cup.
FRAME_AUX_LOSS_WEIGHT = 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Args:
        minutes: wall-clock budget; training stops at whichever of minutes/steps comes first.
        steps: optimiser steps (upper bound).
        span_s / context_s / chunks: sequence shape (see training.data).
        lr / weight_decay / warmup_steps: AdamW with linear warm-up and cosine decay to lr/10.
        val_fraction: share of episodes held out for the validation loss.
        threads: torch CPU threads (0 = torch's default).
        state_noise_rad / state_noise_rad_s: std of the noise on joint-state inputs (training.data).
        drop_states_p: share of training sequences without joint states (training.data.make_sequence).
        views / view_batch: rendered still views (``training.views``) and how many of them join each step's
            loss through the frame head (only with ModelConfig.frame_aux_loss_weight > 0; 0 = none).
        vision_warmup_minutes: the first minutes of the budget (at most a quarter of it) train the stem on
            views alone (fast steps), so the Transformer starts from keypoints that already point at the
            named cup.
        vision_warmup_steps: at most this many warm-up steps (None: the time alone decides; a fixed count
            makes a run repeatable, which tests need).
    """

    minutes: float = 40.0  # plus about 2 min of replaying the bags: the 45-minute budget
    steps: int = 100_000
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
    vision_warmup_minutes: float = 2.0
    vision_warmup_steps: int | None = None

    def __post_init__(self) -> None:
        if self.minutes <= 0 or self.steps <= 0:
            raise ValueError(f"minutes ({self.minutes}) and steps ({self.steps}) must be > 0")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.views < 0 or self.view_batch < 1 or self.vision_warmup_minutes < 0:
            raise ValueError(f"views ({self.views}) and vision_warmup_minutes ({self.vision_warmup_minutes}) "
                             f"must be >= 0, view_batch ({self.view_batch}) >= 1")
        if self.vision_warmup_steps is not None and self.vision_warmup_steps < 0:
            raise ValueError(f"vision_warmup_steps must be >= 0 or None, got {self.vision_warmup_steps}")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def lr_at(step: int, tc: TrainConfig, time_fraction: float) -> float:
    """Linear warm-up, then cosine decay to lr/10 over whichever budget (steps or minutes) runs out first."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    progress = min(1.0, max(step / tc.steps, time_fraction))
    return tc.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(data_dir: str | Path | list, out: str | Path, tc: TrainConfig = TrainConfig(), model_config=None, device: str = "auto",
          progress: bool = True, init: str | Path | None = None, selection=None) -> dict:
    """Train a model on the bags under ``data_dir`` (a folder or a list of folders).

    ``selection``: a :class:`vla_ros.data.selection.BagSelection` (the bags' topic names, the commands'
    joint order, an instruction for the whole bag); None = the sim's topics.

    ``init``: a model folder to continue from (its weights and its config, normalisation included), e.g.
    to fine-tune on expert-labelled rollouts of that model (``vla-ros collect --policy``).
    """
    import torch
    from tqdm import tqdm

    from vla_ros.model.config import ModelConfig
    from vla_ros.model.io import load_model, save_model
    from vla_ros.model.model import VLATransformer
    from vla_ros.model.runtime import resolve_device
    from vla_ros.model.sequence import collate
    from vla_ros.tokens import Kind, TokenizerConfig
    from vla_ros.data.selection import BagSelection
    from vla_ros.training.data import AUX_DIM, load_episodes, mean_image, normalisation_stats, sample_sequence

    t_start = time.time()
    if tc.threads:
        torch.set_num_threads(tc.threads)
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    config = model_config or ModelConfig(aux_dim=AUX_DIM, crop=SIM_CAMERA_CROP, frame_aux_loss_weight=FRAME_AUX_LOSS_WEIGHT)
    model = None
    if init is not None:
        # It keeps the statistics it was trained with (inputs mean the same), and the data is tokenized
        # the way it sees it.
        model = load_model(init)
        config = model.config
    tokenizer = TokenizerConfig.from_model_config(config.to_dict())
    episodes, data_summary = load_episodes(data_dir, tokenizer, config.max_lateness_s, progress=progress,
                                           selection=selection or BagSelection())
    order = rng.permutation(len(episodes))
    n_val = int(round(tc.val_fraction * len(episodes))) if len(episodes) > 1 else 0
    val_eps = [episodes[i] for i in order[:n_val]]
    train_eps = [episodes[i] for i in order[n_val:]]
    dev = resolve_device(device)
    if model is not None:
        model = model.to(dev)
    else:
        config = config.replace(**normalisation_stats(train_eps))
        model = VLATransformer(config).to(dev)
        model.patch_encoder.mean_image.copy_(torch.from_numpy(mean_image(train_eps)))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr)
    val_rng = np.random.default_rng(tc.seed + 1)
    val_batches = [collate([sample_sequence(config, val_eps, tc.span_s, tc.context_s, tc.chunks, val_rng)]) for _ in range(tc.val_sequences if val_eps else 0)]

    def validate() -> float:
        """Action MSE on the validation sequences (the auxiliary loss goes to history["val_aux_loss"])."""
        model.eval()
        with torch.no_grad():
            infos = [model(b.to(dev))[1] for b in val_batches]
        model.train()
        for name in ("aux_loss", "frame_aux_loss"):
            history[f"val_{name}"].append(float(np.mean([i.get(name, np.nan) for i in infos])) if infos else float("nan"))
        return float(np.mean([i["loss"] for i in infos])) if infos else float("nan")

    history = {"step": [], "loss": [], "mae": [], "aux_loss": [], "frame_aux_loss": [], "val_step": [], "val_loss": [], "val_aux_loss": [],
               "val_frame_aux_loss": []}
    views = None
    if model.frame_aux_head is not None and tc.views:
        from vla_ros.training.views import render_views

        n = len(config.joint_names)
        poses = np.concatenate([np.stack([o.data[:n] for o in e.observations if o.kind == Kind.STATE]) for e in train_eps])
        views = render_views(tc.views, tokenizer, poses, seed=tc.seed, progress=progress)
        history["view_loss"] = []
    # The time budget counts from the first step (data loading and rendering are not training time).
    t_train = time.time()
    budget_s = tc.minutes * 60.0
    if views is not None and tc.vision_warmup_minutes > 0 and init is None:  # a fine-tune's stem is trained already
        history["warmup_view_loss"] = vision_warmup(model, views, tc, rng, dev, progress)
    budget_s -= time.time() - t_train
    t_train = time.time()
    bar = tqdm(total=tc.steps, desc="training", unit="step", disable=not progress)
    step, best_val, smooth = 0, float("inf"), None
    model.train()
    while step < tc.steps and time.time() - t_train < budget_s:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc, (time.time() - t_train) / budget_s)
        noise = (tc.state_noise_rad, tc.state_noise_rad_s)
        batch = collate([sample_sequence(config, train_eps, tc.span_s, tc.context_s, tc.chunks, rng, noise, tc.drop_states_p) for _ in range(tc.batch_sequences)]).to(dev)
        loss, info = model(batch)
        if views is not None:
            view_loss = model.view_loss(*view_batch(views, tc.view_batch, rng, dev))
            history["view_loss"].append(float(view_loss.detach()))
            loss = loss + view_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        smooth = info["loss"] if smooth is None else 0.98 * smooth + 0.02 * info["loss"]
        history["step"].append(step)
        history["loss"].append(info["loss"])
        history["mae"].append(info["mae"])
        history["aux_loss"].append(info.get("aux_loss", float("nan")))
        history["frame_aux_loss"].append(info.get("frame_aux_loss", float("nan")))
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
    bar.close()
    final_val = validate() if val_batches else float("nan")
    duration_min = (time.time() - t_start) / 60.0
    out = Path(out)
    report = {
        "data": {**data_summary, "train_episodes": len(train_eps), "val_episodes": len(val_eps),
                 "path": str(data_dir) if isinstance(data_dir, (str, Path)) else [str(d) for d in data_dir]},
        "init": str(init) if init is not None else None,
        "train_config": dataclasses.asdict(tc),
        "steps": step, "duration_min": round(duration_min, 2), "device": str(dev), "threads": torch.get_num_threads(),
        "final_train_loss_smoothed": smooth, "final_val_loss": final_val,
        "final_val_aux_loss": history["val_aux_loss"][-1] if history["val_aux_loss"] else None,
        "final_val_frame_aux_loss": history["val_frame_aux_loss"][-1] if history["val_frame_aux_loss"] else None,
        "best_val_loss": best_val if best_val < float("inf") else None,
        "final_mae_rad": float(np.mean(history["mae"][-100:])) if history["mae"] else None,
        "parameters": model.num_parameters(), "git_commit": git_commit(), "torch": torch.__version__,
        "vision_warmup_steps": len(history.get("warmup_view_loss", [])),
    }
    metadata = {"training": json.dumps({k: report[k] for k in ("steps", "duration_min", "final_val_loss", "git_commit")}),
                "data_sha256": data_summary["sha256"], "seed": str(tc.seed), "git_commit": report["git_commit"]}
    save_model(model.cpu(), out, metadata=metadata, onnx=True)
    (out / "train_report.json").write_text(json.dumps({**report, "history": history}, indent=1))
    plot_losses(history, out / "loss.png")
    return report


def view_batch(views, n: int, rng: np.random.Generator, dev):
    """n random still views as (images, instruction vectors, scaled named-cup targets) tensors on dev."""
    import torch

    from vla_ros.training.data import scale_aux

    frames, instructions, cups = views.sample(n, rng)
    return (torch.from_numpy(frames).to(dev), torch.from_numpy(instructions).to(dev), torch.from_numpy(scale_aux(cups)).to(dev))


def vision_warmup(model, views, tc: TrainConfig, rng: np.random.Generator, dev, progress: bool) -> list[float]:
    """Train the stem and the frame head alone on still views for ``tc.vision_warmup_minutes`` (at most
    ``tc.vision_warmup_steps`` steps)."""
    import torch
    from tqdm import tqdm

    params = [*model.patch_encoder.parameters(), *model.frame_aux_head.parameters(), *model.instruction_norm.parameters()]
    opt = torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay)
    losses, t0 = [], time.time()
    bar = tqdm(desc="vision warm-up", unit="step", disable=not progress)
    model.train()
    cap = tc.vision_warmup_steps if tc.vision_warmup_steps is not None else float("inf")
    while len(losses) < cap and time.time() - t0 < min(tc.vision_warmup_minutes, tc.minutes / 4.0) * 60.0:
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
    if len(loss):
        ax.plot(steps, loss, color="0.8", lw=0.6, label="train (per step)")
        k = max(1, len(loss) // 100)
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1:], smooth, color="C0", lw=1.5, label=f"train ({k}-step mean)")
    view = np.asarray(history.get("view_loss", []))
    if len(view) > k:
        ax.plot(steps[k - 1:len(view)], np.convolve(view, np.ones(k) / k, mode="valid"), color="C1", lw=1.0,
                label="train, named cup on rendered views")
    if history["val_loss"]:
        ax.plot(history["val_step"], history["val_loss"], "o-", color="C3", ms=3, label="validation")
        aux = history.get("val_aux_loss", [])[:len(history["val_step"])]
        if aux and np.isfinite(aux).any():
            ax.plot(history["val_step"], aux, "s--", color="C2", ms=3, label="validation, named cup position (aux)")
        frame_aux = history.get("val_frame_aux_loss", [])[:len(history["val_step"])]
        if frame_aux and np.isfinite(frame_aux).any():
            ax.plot(history["val_step"], frame_aux, "^:", color="C4", ms=3, label="validation, named cup from the frame's keypoints")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("MSE (normalised joint positions)")
    ax.set_title("vla-ros train")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _names(text: str | None) -> tuple[str, ...] | None:
    """'a,b c' -> ('a', 'b', 'c'); None stays None."""
    return None if text is None else tuple(n for n in text.replace(",", " ").split() if n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vla-ros train", description=__doc__.splitlines()[0], epilog=EXAMPLE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, nargs="+",
                        help="bags: rosbag2 bag folders, .mcap files, or folders of them (vla-ros collect, vla-ros record, ros2 bag record)")
    parser.add_argument("--init", default=None, help="model folder to continue training from (fine-tuning)")
    parser.add_argument("--out", required=True, help="model folder to write, e.g. models/vla_cups")
    parser.add_argument("--minutes", type=float, default=TrainConfig.minutes, help="wall-clock budget (default 40)")
    parser.add_argument("--steps", type=int, default=TrainConfig.steps, help="optimiser steps at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    robot = parser.add_argument_group("your own robot's bags (defaults: the simulated arm's names)")
    robot.add_argument("--joints", default=None,
                       help="joint names to learn, in order (comma-separated); the joint states must name them all")
    robot.add_argument("--command-joints", default=None,
                       help="joint order of the Float64MultiArray commands (default: --joints)")
    robot.add_argument("--camera-topic", default=None, help="sensor_msgs/Image or CompressedImage topic (default /camera/image_raw)")
    robot.add_argument("--joint-states-topic", default=None, help="sensor_msgs/JointState topic (default /joint_states)")
    robot.add_argument("--command-topic", default=None,
                       help="std_msgs/Float64MultiArray commands, the targets (default /forward_position_controller/commands)")
    robot.add_argument("--instruction-topic", default=None, help="std_msgs/String instruction topic (default /vla/instruction)")
    robot.add_argument("--instruction", default=None, help="the task of every bag (the instruction topic is then not read)")
    args = parser.parse_args(argv)
    from vla_ros.data.bag import BagError
    from vla_ros.data.dataset import Topics
    from vla_ros.data.selection import BagSelection, NoUsableEpisodes

    joints = _names(args.joints)
    try:
        selection = BagSelection(
            Topics.for_robot(args.camera_topic, args.joint_states_topic, args.command_topic, args.instruction_topic),
            instruction=args.instruction, command_joint_names=_names(args.command_joints) or joints)
        model_config = None
        if joints is not None:
            if args.init:
                raise ValueError("--joints and --init: a fine-tune keeps the joints of the model it starts from")
            from vla_ros.model.config import ModelConfig

            # Another robot: no sim-specific crop or cup heads (they need the sim's episode statuses).
            model_config = ModelConfig(joint_names=joints)
        tc = TrainConfig(minutes=args.minutes, steps=args.steps, seed=args.seed, threads=args.threads, lr=args.lr)
    except ValueError as exc:  # the options themselves
        print(f"vla-ros train: {exc}", file=sys.stderr)
        return 2
    try:
        report = train(args.data, args.out, tc, model_config=model_config, device=args.device, init=args.init, selection=selection)
    except (BagError, NoUsableEpisodes) as exc:  # the data: a bad path, a broken file, nothing usable
        print(f"vla-ros train: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: report[k] for k in ("steps", "duration_min", "final_val_loss", "final_val_aux_loss", "final_val_frame_aux_loss",
                                        "final_mae_rad", "parameters")} | {"out": args.out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
