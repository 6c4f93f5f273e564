"""``vla-ros attention``: does the colour word look at the right cup?

For frames of sim episodes (the scripted expert drives the arm, so every run sees the same scenes), the
window the policy would hold is run through the model in one full pass with attention weights; for each
instruction word, the attention the newest frame's patch tokens pay to it is drawn as a heat map over
the camera image (one panel per word, PNG). ``grounding_ratio``: the share of the colour word's
attention that falls on the patches covering the named cup, divided by those patches' share of the
image (1 = no preference, higher = grounded), averaged over frames, layers and heads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

EXAMPLE = "example: vla-ros attention --model models/vla_cups --episodes 3 --out runs/attention --json"


def cup_patches(sim, color: str, grid: tuple[int, int], crop=(0.0, 0.0, 0.0, 0.0)) -> np.ndarray:
    """(rows*cols,) bool: patches whose cell overlaps the projected outline of the named cup."""
    from vla_ros.sim.scene import CUP_HALF_HEIGHT_M, CUP_RADIUS_M

    center = sim.cup_positions()[color]
    ang = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    ring = np.stack([np.cos(ang) * CUP_RADIUS_M, np.sin(ang) * CUP_RADIUS_M, np.zeros_like(ang)], axis=1)
    pts = np.concatenate([center + ring + [0, 0, dz] for dz in (-CUP_HALF_HEIGHT_M, CUP_HALF_HEIGHT_M)])
    uv = sim.project(pts)
    k = sim.camera_intrinsics()
    top, bottom, left, right = crop
    x0, x1 = left * k.width, k.width * (1 - right)
    y0, y1 = top * k.height, k.height * (1 - bottom)
    rows, cols = grid
    u = (uv[:, 0] - x0) / (x1 - x0) * cols
    v = (uv[:, 1] - y0) / (y1 - y0) * rows
    mask = np.zeros((rows, cols), bool)
    r0, r1 = int(np.clip(np.floor(v.min()), 0, rows - 1)), int(np.clip(np.floor(v.max()), 0, rows - 1))
    c0, c1 = int(np.clip(np.floor(u.min()), 0, cols - 1)), int(np.clip(np.floor(u.max()), 0, cols - 1))
    mask[r0 : r1 + 1, c0 : c1 + 1] = True
    return mask.reshape(-1)


def frame_attention(model, config, window, instruction, pinned=None) -> np.ndarray:
    """(layers, heads, L, P): attention of the newest frame's patch tokens to each instruction token.
    ``pinned``: the policy's pinned frame (``StreamingPolicy.pinned``), for a model with ``pin_first_frame``."""
    import torch

    from vla_ros.model.sequence import ChunkSpec, build_sequence, collate
    from vla_ros.tokens import Kind

    seq = build_sequence(
        config, window, text=instruction.embeddings, chunks=[ChunkSpec(anchor=window[-1].key)], pinned=pinned
    )
    batch = collate([seq]).to(next(model.parameters()).device)  # the node's model may live on a GPU
    with torch.no_grad():
        out = model.full_pass(batch, need_weights=True)
    frame_rows = [i for i, o in enumerate(window) if o.kind == Kind.IMAGE and o.camera == 0]  # the main view
    newest = frame_rows[-1]
    rows = np.flatnonzero((seq.token_obs == newest) & (seq.kind == int(Kind.IMAGE)))  # (P,) query rows
    L = instruction.embeddings.shape[0]
    maps = []
    for w in out.weights:  # (1, H, T, T) per layer
        a = w[0].float().cpu().numpy()  # (H, T, T)
        maps.append(a[:, rows][:, :, :L].transpose(0, 2, 1))  # (H, L, P)
    return np.stack(maps)  # (layers, H, L, P)


def word_rows(tokens, color: str | None) -> list[int]:
    """Rows of the instruction tokens that are the colour word ([] when there is none or it is absent)."""
    return [] if color is None else [i for i, t in enumerate(tokens) if t == color]


def word_heat(att: np.ndarray, tokens, color: str | None) -> np.ndarray:
    """(P,): attention of the newest frame's patches to the colour word's token(s), mean over layers and
    heads; without a colour word, the mean over all instruction tokens. att: (layers, H, L, P)."""
    rows = word_rows(tokens, color) or list(range(att.shape[2]))
    return att[:, :, rows, :].mean(axis=(0, 1, 2))


def live_overlay(model, config, window, instruction, rgb: np.ndarray, pinned=None) -> np.ndarray:
    """The heat map of the colour word the instruction names (``named_color``) over the crop of ``rgb``,
    the newest camera frame of ``window``, as the model sees it: what the policy node publishes."""
    from vla_ros.tasks.cups import named_color

    att = frame_attention(model, config, window, instruction, pinned)  # (layers, H, L, P)
    heat = word_heat(att, instruction.tokens, named_color(instruction.text))
    return overlay(crop_image(rgb, config.crop), heat, config.patch_grid)


def crop_image(rgb: np.ndarray, crop) -> np.ndarray:
    """The part of the camera image the model sees (the tokenizer's crop), so patches line up with it."""
    top, bottom, left, right = crop
    h, w = rgb.shape[:2]
    return rgb[round(top * h) : h - round(bottom * h), round(left * w) : w - round(right * w)]


def overlay(rgb: np.ndarray, heat: np.ndarray, grid) -> np.ndarray:
    import cv2

    rows, cols = grid
    h = heat.reshape(rows, cols)
    h = (h - h.min()) / (np.ptp(h) + 1e-12)
    big = cv2.resize(h.astype(np.float32), (rgb.shape[1], rgb.shape[0]), interpolation=cv2.INTER_NEAREST)
    color = cv2.applyColorMap((big * 255).astype(np.uint8), cv2.COLORMAP_JET)[:, :, ::-1]
    return (0.55 * rgb + 0.45 * color).astype(np.uint8)


def _episode_session(session, text: str):
    """Start an episode in the policy session (the window the policy node keeps), ``text`` pinned at time 0."""
    session.reset()
    return session.set_instruction(text, 0)


def _feed_sensors(sim, session) -> np.ndarray | None:
    """The joint state and the frames of the model's cameras the sim publishes at this step, into
    ``session``; the main camera's RGB or None."""
    from vla_ros.ros.sim_msgs import sensor_messages

    js, frames = sensor_messages(sim, session.cameras)
    if js is not None:
        session.add_message("sensor_msgs/msg/JointState", js, sim.time_ns, "/joint_states")
    for camera, _rgb, image in frames:
        session.add_message("sensor_msgs/msg/Image", image, sim.time_ns, session.topic_of(camera))
    return frames[0][1] if frames else None


def _session(model):
    """A policy session around ``model`` (torch, CPU): its intake and window are what the tools read."""
    from vla_ros.model.runtime import StreamingPolicy
    from vla_ros.policy import PolicySession
    from vla_ros.tokens.text import shared_encoder

    return PolicySession(
        StreamingPolicy.from_model(model, device=next(model.parameters()).device),
        shared_encoder(model.config.max_text_tokens),
    )


def cup_estimates(model, window, text_embeddings, pinned=None) -> tuple[np.ndarray, np.ndarray | None]:
    """Where the model's cup heads put the named cup (world xy, m) on ``window`` (a policy session's
    observations): the auxiliary head on the action tokens of a chunk anchored at the newest observation
    (what the Transformer believes from the whole window), and the frame head on the newest main-camera
    frame's keypoints alone (None for a model without one)."""
    import torch

    from vla_ros.model.sequence import ChunkSpec, build_sequence, collate, frame_cameras
    from vla_ros.model.timeline import ACTION
    from vla_ros.tasks.cups import unscale_aux

    seq = build_sequence(
        model.config, window, text=text_embeddings, chunks=[ChunkSpec(anchor=window[-1].key)], pinned=pinned
    )
    with torch.no_grad():
        out = model.full_pass(collate([seq]))
        rows = np.flatnonzero(seq.kind == ACTION)
        aux = model.aux_head(out.hidden[0, rows]).mean(0).numpy()
        main = np.flatnonzero(frame_cameras(seq) == 0)  # the frame head reads the main view
        frame_aux = (
            model.frame_aux_head(out.keypoints[main[-1:]])[0].numpy() if model.frame_aux_head is not None else None
        )
    return unscale_aux(aux)[:2], None if frame_aux is None else unscale_aux(frame_aux)[:2]


def named_cup_error_at_rest(model, session, sim, seeds, templates, rest_s: float = 0.6) -> dict:
    """Where the model's auxiliary head puts the named cup while the arm has not moved yet.

    At rest only the camera says where the cup is (half a second of joint states says it everywhere
    else), so this separates a policy that looks from one that reads the target off its own motion: the
    latter predicts the same point, the average cup, for every layout. Returns the mean and spread of the
    xy error (m) and the spread of the predictions across layouts (m; near 0 = not looking); with a frame
    head (``ModelConfig.frame_aux_loss_weight``) also its error on the newest frame alone ("frame_head_mean"):
    what the vision stem knows, before the Transformer uses it.
    """
    from vla_ros.sim.tasks import episode_task

    errors, predictions, frame_errors = [], [], []
    for ep_seed in seeds:
        color, text = episode_task(ep_seed, templates)
        sim.reset(ep_seed)
        instruction = _episode_session(session, text)
        while sim.time_s < rest_s:  # no command: the arm holds its start pose
            _feed_sensors(sim, session)
            sim.step()
        xy, frame_xy = cup_estimates(model, session.window(), instruction.embeddings, session.policy.pinned)
        cup_xy = sim.cup_positions()[color][:2]
        predictions.append(xy)
        errors.append(float(np.linalg.norm(xy - cup_xy)))
        if frame_xy is not None:
            frame_errors.append(float(np.linalg.norm(frame_xy - cup_xy)))
    spread = float(np.linalg.norm(np.std(predictions, axis=0)))
    result = {
        "mean": round(float(np.mean(errors)), 4),
        "max": round(float(np.max(errors)), 4),
        "prediction_spread": round(spread, 4),
        "layouts": len(seeds),
    }
    if frame_errors:
        result["frame_head_mean"] = round(float(np.mean(frame_errors)), 4)
    return result


def run(
    model_dir,
    episodes: int = 3,
    seed: int = 0,
    frames_per_episode: int = 6,
    out: Path | None = None,
    templates=None,
    rest_layouts: int = 12,
) -> dict:
    import torch

    from vla_ros.model.io import load_model
    from vla_ros.sim import ArmSim
    from vla_ros.sim.expert import PickExpert
    from vla_ros.sim.tasks import EVAL_SEED_START, HELDOUT_TEMPLATES, eval_episodes

    torch.manual_seed(0)
    model = load_model(model_dir).eval()
    config = model.config
    session = _session(model)
    sim = ArmSim()
    ratios, per_layer, panels = [], [], []
    tasks = eval_episodes(episodes, seed, templates or HELDOUT_TEMPLATES)
    for e, (ep_seed, color, instruction_text) in enumerate(tasks):
        sim.reset(ep_seed)
        instruction = _episode_session(session, instruction_text)
        words = list(instruction.tokens)
        rows = word_rows(words, color)
        color_idx = rows[0] if rows else None
        expert = PickExpert()
        sample_at = set(np.linspace(0.4, 2.0, frames_per_episode).round(2))
        while sim.time_s < 2.05:
            rgb = _feed_sensors(sim, session)
            if sim.is_joint_state_step():
                sim.command_positions(
                    None,
                    expert.command(sim.time_s, sim.tcp_position(), sim.cup_positions()[color], sim.joint_positions()),
                )
            if rgb is not None:
                if round(sim.time_s, 2) in sample_at or any(abs(sim.time_s - t) < 0.017 for t in sample_at):
                    sample_at = {t for t in sample_at if abs(sim.time_s - t) >= 0.017}
                    att = frame_attention(
                        model, config, session.window(), instruction, session.policy.pinned
                    )  # (layers, H, L, P)
                    target = cup_patches(sim, color, config.patch_grid, config.crop)
                    share = target.mean()
                    if color_idx is not None and share > 0:
                        a = att[:, :, color_idx, :]  # (layers, H, P)
                        mass = a[..., target].sum(-1) / a.sum(-1)  # (layers, H)
                        ratios.append(float(mass.mean() / share))
                        per_layer.append((mass.mean(axis=1) / share).tolist())
                    if len(panels) < 2 and e < 2:
                        panels.append((rgb, att.mean(axis=(0, 1)), words, color, instruction_text))
            sim.step()
    rest_error = None
    if getattr(model, "aux_head", None) is not None:
        seeds = [EVAL_SEED_START + seed + e for e in range(rest_layouts)]
        rest_error = named_cup_error_at_rest(model, session, sim, seeds, templates or HELDOUT_TEMPLATES)
    sim.close()
    result = {
        "grounding_ratio": round(float(np.mean(ratios)), 3) if ratios else None,
        "grounding_ratio_by_layer": [round(float(v), 3) for v in np.mean(per_layer, axis=0)] if per_layer else None,
        "named_cup_error_at_rest_m": rest_error,
        "frames": len(ratios),
        "episodes": episodes,
        "model": str(model_dir),
    }
    if out is not None and panels:
        out.mkdir(parents=True, exist_ok=True)
        for i, (rgb, att, words, color, text) in enumerate(panels):
            draw_panels(
                crop_image(rgb, config.crop),
                att,
                words,
                config.patch_grid,
                f"{text!r} (target: {color})",
                out / f"attention_{i}.png",
            )
        (out / "attention.json").write_text(json.dumps(result, indent=1))
    return result


def draw_panels(rgb, att, words, grid, title, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(words)
    cols = min(4, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows))
    for ax in np.atleast_1d(axes).flat:
        ax.axis("off")
    for i, word in enumerate(words):
        ax = np.atleast_1d(axes).flat[i]
        ax.imshow(overlay(rgb, att[i], grid))
        ax.set_title(word, fontsize=10)
    fig.suptitle(f"attention of the newest frame's patches to each word: {title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vla-ros attention", description=__doc__.splitlines()[0], epilog=EXAMPLE)
    parser.add_argument("--model", default="vla_cups")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="offset into the evaluation seed range")
    parser.add_argument("--frames", type=int, default=6, help="frames per episode")
    parser.add_argument("--out", default="", help="output folder (default runs/attention-<date>)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    import datetime

    from vla_ros.model.io import resolve_model_dir

    out = Path(args.out or f"runs/attention-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    result = run(resolve_model_dir(args.model), args.episodes, args.seed, args.frames, out)
    if not args.json:
        print(f"grounding_ratio {result['grounding_ratio']} over {result['frames']} frames; panels in {out}")
    print(json.dumps(result))
    return 0
