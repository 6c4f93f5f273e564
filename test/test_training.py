"""`vla-ros collect` -> `vla-ros train` end to end on a tiny model: the model folder is complete, loads in
both backends, and the loss falls."""

import json

import numpy as np
import torch

from vla_ros.model.config import tiny_config
from vla_ros.model.runtime import StreamingPolicy
from vla_ros.tokens import TokenizerConfig
from vla_ros.tools import collect
from vla_ros.training.data import load_episodes, make_sequence
from vla_ros.training.train import TrainConfig, train


def test_collect_then_train_writes_a_complete_model_folder(tmp_path):
    assert collect.main(["--episodes", "4", "--seed-start", "20", "--out", str(tmp_path / "demos")]) == 0
    kept = len(list((tmp_path / "demos").glob("*.mcap")))  # the expert's rare failures are not kept
    assert kept >= 3
    torch.manual_seed(0)
    config = tiny_config(chunk_length=4, chunk_rate_hz=10.0)
    tc = TrainConfig(minutes=2.0, steps=200, span_s=0.5, context_s=0.3, chunks=6, val_fraction=0.34, val_every=20, val_sequences=4, warmup_steps=5, lr=3e-3, threads=1)
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
    assert make_sequence(config, episodes[0], episodes[0].t_s[-1], 0.5, 0.3, 6, np.random.default_rng(0)) is not None
