"""`vla-ros collect` -> `vla-ros train` end to end on a tiny model: the model folder is complete, loads in
both backends, and the loss falls."""

import json

import numpy as np
import pytest
import torch

from vla_ros.model.config import tiny_config
from vla_ros.model.runtime import StreamingPolicy
from vla_ros.tokens import Kind, TokenizerConfig
from vla_ros.tools import collect
from vla_ros.sim.tasks import episode_task
from vla_ros.training.data import AUX_CENTER_M, AUX_DIM, AUX_SCALE_M, aux_target, load_episodes, make_sequence, named_color
from vla_ros.training.train import TrainConfig, train


def test_collect_then_train_writes_a_complete_model_folder(tmp_path):
    assert collect.main(["--episodes", "4", "--seed-start", "20", "--out", str(tmp_path / "demos")]) == 0
    kept = len(list((tmp_path / "demos").glob("*.mcap")))  # the expert's rare failures are not kept
    assert kept >= 3
    torch.manual_seed(0)
    config = tiny_config(chunk_length=4, chunk_rate_hz=10.0, aux_dim=AUX_DIM, frame_aux_loss_weight=1.0)
    tc = TrainConfig(minutes=2.0, steps=200, span_s=0.5, context_s=0.3, chunks=6, val_fraction=0.34, val_every=20, val_sequences=4, warmup_steps=5, lr=3e-3, threads=1,
                     views=48, view_batch=8, vision_warmup_minutes=0.5, vision_warmup_steps=600)  # a step count: repeatable
    report = train(tmp_path / "demos", tmp_path / "model", tc, model_config=config, device="cpu", progress=False)
    out = tmp_path / "model"
    for name in ("config.json", "model.safetensors", "model.onnx", "loss.png", "train_report.json"):
        assert (out / name).is_file(), name
    history = json.loads((out / "train_report.json").read_text())["history"]
    first, last = np.mean(history["loss"][:10]), np.mean(history["loss"][-10:])
    assert last < 0.6 * first, (first, last)
    assert report["data"]["episodes"] == kept and report["data"]["val_episodes"] >= 1 and len(report["data"]["sha256"]) == 64
    saved = json.loads((out / "config.json").read_text())
    assert saved["metadata"]["data_sha256"] == report["data"]["sha256"]
    assert len(saved["state_mean"]) == 14 and len(saved["action_std"]) == 7  # normalisation from the data
    # both backends load the folder and agree on a chunk
    episodes, _ = load_episodes(tmp_path / "demos", TokenizerConfig.from_model_config(saved), config.max_lateness_s, progress=False)
    seq_obs = episodes[0].observations[:60]
    chunks = []
    for backend in ("torch", "onnx"):
        policy = StreamingPolicy.from_pretrained(out, backend=backend, device="cpu")
        policy.set_instruction(episodes[0].text)
        policy.observe(seq_obs)
        chunks.append(policy.predict_action_chunk().positions)
    np.testing.assert_allclose(chunks[0], chunks[1], atol=1e-4)
    assert saved["aux_dim"] == AUX_DIM
    aux = np.array(history["aux_loss"])
    assert len(aux) == len(history["loss"]) and np.isfinite(aux).all()  # trained at every step
    # the auxiliary target is the named cup's position, read from the bag's episode statuses
    ep = episodes[0]
    seed = int(ep.name.split("_")[1].split(".")[0])
    assert named_color(ep.instruction) == episode_task(seed)[0]
    seq = make_sequence(config, ep, ep.t_s[-1], 0.5, 0.3, 6, np.random.default_rng(0))
    rows = seq.aux[np.isfinite(seq.aux).all(axis=1)]
    assert len(rows) == 6 * config.chunk_length
    cup_m = rows * AUX_SCALE_M + AUX_CENTER_M
    assert np.abs(cup_m - ep.cup_m[-1]).max() < 0.05  # at the end of the episode: the lifted cup (others are >= 11 cm away)
    assert cup_m[:, 2].min() > 0.045 + 0.03  # ... lifted
    # ... and every camera frame of the window carries the named cup's position at its own time
    frames = [o for o in sorted((o for o in ep.observations if ep.t_s[-1] - 0.8 <= o.t_s <= ep.t_s[-1]), key=lambda o: o.key)
              if o.kind == Kind.IMAGE]
    assert seq.frame_aux.shape == (len(frames), AUX_DIM) == (seq.images.shape[0], AUX_DIM)
    np.testing.assert_allclose(seq.frame_aux, np.stack([aux_target(ep, o.t_s) for o in frames]), atol=1e-6)
    frame_aux = np.array(history["frame_aux_loss"])
    assert len(frame_aux) == len(history["loss"]) and np.isfinite(frame_aux).all()  # trained at every step
    # the rendered views trained the frame head too: alone first (warm-up, where its loss falls), then
    # beside every step
    assert report["vision_warmup_steps"] == 600 and len(history["view_loss"]) == len(history["loss"])
    warm = np.array(history["warmup_view_loss"])
    third = len(warm) // 3
    assert np.mean(warm[-third:]) < 0.8 * np.mean(warm[:third]), warm
    # --init continues from the folder: its normalisation kept, no vision warm-up, and the loss starts where
    # the first run ended rather than where a fresh model starts
    tc2 = TrainConfig(minutes=1.0, steps=10, span_s=0.5, context_s=0.3, chunks=6, val_fraction=0.34, val_every=5, val_sequences=4, warmup_steps=2, lr=1e-3, threads=1,
                      views=48, view_batch=8, vision_warmup_minutes=0.05)
    report2 = train(tmp_path / "demos", tmp_path / "tuned", tc2, device="cpu", progress=False, init=out)
    tuned = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert report2["vision_warmup_steps"] == 0 and report2["init"] == str(out)
    for key in ("state_mean", "state_std", "action_mean", "action_std"):
        assert tuned[key] == saved[key], key
    history2 = json.loads((tmp_path / "tuned" / "train_report.json").read_text())["history"]
    assert np.mean(history2["loss"][:5]) < 0.6 * first, (np.mean(history2["loss"][:5]), first)


def test_loss_weights_do_not_blow_up_joints_that_barely_move():
    """A joint's std is its loss scale: a roll joint that only settles from a perturbed start must not weigh
    a hundred times more than the shoulder; a small-range gripper keeps its own scale."""
    from vla_ros.training.data import floored_std

    rng = np.random.default_rng(0)
    shoulder = rng.normal(0.0, 0.3, 1000)
    roll = np.r_[np.linspace(0.3, 0.0, 20), np.zeros(980)] + rng.normal(0.0, 0.001, 1000)
    gripper = np.r_[np.full(600, 0.04), np.zeros(400)]
    still = np.zeros(1000)
    std = floored_std(np.stack([shoulder, roll, gripper, still], axis=1))
    assert std[0] == pytest.approx(shoulder.std())
    assert std[1] == pytest.approx(0.3 / 4, rel=0.05) and std[1] > 2 * roll.std()
    assert std[2] == pytest.approx(gripper.std())  # about 0.02, above its range / 4 = 0.01
    assert std[3] == 0.01


def test_rendered_views_label_the_cup_that_is_in_the_picture():
    """Each still view's labels are the cups its frame shows: at the pixel where a cup's centre projects
    (through the crop and resize of the tokenizer), the frame has that cup's colour."""
    from vla_ros.model.config import ModelConfig
    from vla_ros.sim import HOME_Q
    from vla_ros.sim.arm_sim import ArmSim, SimConfig
    from vla_ros.sim.tasks import COLORS, TRAIN_TEMPLATES
    from vla_ros.training.train import SIM_CAMERA_CROP
    from vla_ros.training.views import VIEW_SEED_OFFSET, render_views

    tok = TokenizerConfig.from_model_config(ModelConfig(crop=SIM_CAMERA_CROP).to_dict())
    views = render_views(6, tok, np.array([HOME_Q]), progress=False)
    assert views.frames.shape == (6, 3, tok.image_height, tok.image_width)
    assert views.instructions.shape == (len(COLORS), len(TRAIN_TEMPLATES), 384)
    sim = ArmSim(SimConfig())
    top, bottom, left, right = tok.crop
    w, h = sim.config.image_width, sim.config.image_height
    sx, sy = tok.image_width / (w - round(left * w) - round(right * w)), tok.image_height / (h - round(top * h) - round(bottom * h))
    rgb = views.frames * np.asarray(tok.image_std)[:, None, None] + np.asarray(tok.image_mean)[:, None, None]
    for k in range(6):
        sim.reset(VIEW_SEED_OFFSET + k)
        cups = sim.cup_positions()
        for c, color in enumerate(COLORS):
            np.testing.assert_allclose(views.cups_m[k, c], cups[color])
            u, v = sim.project(cups[color])[0]
            col, row = int((u - round(left * w)) * sx), int((v - round(top * h)) * sy)
            pixel = rgb[k, :, row, col]
            assert int(np.argmax(pixel)) == c, (k, color, pixel)  # red, green, blue are channels 0, 1, 2
    sim.close()
    # the phrasings name their colour: the vectors of two colours differ, those of one colour stay close
    red, blue = views.instructions[0], views.instructions[2]
    assert np.linalg.norm(red.mean(0) - blue.mean(0)) > 0.1


def test_train_config_rejects_bad_values_and_keeps_the_warm_up_inside_short_budgets():
    with pytest.raises(ValueError, match="vision_warmup_minutes"):
        TrainConfig(vision_warmup_minutes=-1.0)
    with pytest.raises(ValueError, match="vision_warmup_steps"):
        TrainConfig(vision_warmup_steps=-1)
    with pytest.raises(ValueError, match="view_batch"):
        TrainConfig(view_batch=0)
    assert TrainConfig(minutes=1.0).vision_warmup_minutes == 2.0  # a 1-minute run is valid: its warm-up is 15 s


def test_views_and_the_view_loss_refuse_what_they_cannot_use():
    from vla_ros.model.model import VLATransformer
    from vla_ros.sim import HOME_Q
    from vla_ros.training.views import render_views

    tok = TokenizerConfig.from_model_config(tiny_config().to_dict())
    with pytest.raises(ValueError, match="at least one arm pose"):
        render_views(4, tok, np.zeros((0, 7)), progress=False)
    with pytest.raises(ValueError, match="n >= 1"):
        render_views(0, tok, np.array([HOME_Q]), progress=False)
    config = tiny_config(aux_dim=AUX_DIM)  # an aux head but no frame head
    images = torch.zeros(2, 3, config.image_height, config.image_width)
    with pytest.raises(ValueError, match="needs a frame head"):
        VLATransformer(config).view_loss(images, torch.zeros(2, 384), torch.zeros(2, AUX_DIM))
    loss = VLATransformer(tiny_config(aux_dim=AUX_DIM, frame_aux_loss_weight=2.0)).view_loss(images, torch.zeros(2, 384), torch.zeros(2, AUX_DIM))
    assert loss.ndim == 0 and float(loss) > 0.0
