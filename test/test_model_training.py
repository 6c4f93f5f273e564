"""Training path: forward(batch) -> (loss, info) overfits a handful of samples (catches target shift, mask and
padding mistakes), chunk targets sit at anchor + (k + 1) / rate and leave gaps in the recording without a target
(data.targets);
and the benchmarks' command lines."""

import json

import numpy as np
import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)

from vla_ros.bench import gpu_check, policy_bench
from vla_ros.data.targets import chunk_offsets_s, chunk_targets, chunk_usable, target_track
from vla_ros.model import ChunkSpec, ModelConfig, VLATransformer, build_sequence, collate, tiny_config
from vla_ros.model.synthetic import random_instruction, synthetic_stream
from vla_ros.tokens.types import Kind

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


def test_chunk_targets_are_the_future_positions():
    config = ModelConfig()  # 16 points at 20 Hz
    t_s = np.arange(300) * 0.01 + 86_400.0  # a day after the episode's epoch: still exact to the nanosecond
    positions = np.stack([0.1 * j + 0.5 * t_s for j in range(7)], axis=1)  # q_j(t) = 0.1 j + 0.5 t
    offsets = np.asarray(config.chunk_offsets_ns) / 1e9
    np.testing.assert_array_equal(offsets, chunk_offsets_s(config.chunk_length, config.chunk_rate_hz))
    anchor = t_s[100] + 0.003  # between two samples
    targets = chunk_targets(t_s, positions, anchor, offsets)
    k = np.arange(config.chunk_length)
    np.testing.assert_allclose(targets[:, 3], 0.3 + 0.5 * (anchor + (k + 1) / config.chunk_rate_hz), rtol=0, atol=1e-9)
    late = chunk_targets(t_s, positions, t_s[-30], offsets)  # 290 ms of recording left
    assert np.isfinite(late[:5]).all() and np.isnan(late[5:]).all()  # past the recording: no target
    assert chunk_usable(late) and not chunk_usable(chunk_targets(t_s, positions, t_s[-1], offsets))
    early = chunk_targets(t_s, positions, t_s[0] - 0.12, offsets)  # the recording starts with point 3
    assert np.isnan(early[:2]).all() and np.isfinite(early[2:]).all() and not chunk_usable(early)


def test_chunk_targets_leave_gaps_in_the_recording_without_a_target():
    """A stretch where nobody commanded (a policy-driven part of a rollout) has no target, to its very edges;
    a jittery 10 Hz source is interpolated everywhere; a point on a sample keeps the sample."""
    t_s = np.r_[np.arange(0.0, 1.0, 0.01), np.arange(1.6, 2.5, 0.01)]  # 100 Hz, silent from 0.99 to 1.6 s
    positions = np.stack([t_s, -t_s], axis=1)
    offsets = np.arange(1, 9) * 0.05
    targets = chunk_targets(t_s, positions, 0.9, offsets)  # points at 0.95 ... 1.30 s
    assert (
        np.isfinite(targets[0]).all() and np.isnan(targets[1:]).all()
    )  # 1.0 s, 10 ms after a command, is inside the silence
    np.testing.assert_allclose(targets[0], [0.95, -0.95], atol=1e-12)
    after = chunk_targets(t_s, positions, 1.55, offsets)  # 1.60 lies on the first sample after the silence
    assert np.isfinite(after).all() and chunk_usable(after)
    rng = np.random.default_rng(0)
    slow = np.cumsum(rng.uniform(0.07, 0.1, 40))  # 10-14 Hz with jitter
    assert np.isfinite(chunk_targets(slow, slow[:, None], slow[1], np.arange(1, 9) * 0.05)).all()
    with pytest.raises(ValueError, match="at least 2 recorded samples"):
        chunk_targets(t_s[:1], positions[:1], 0.0, offsets)


def test_chunk_targets_hold_the_last_command_for_hold_s_past_the_end_and_nowhere_else():
    """hold_s: points up to hold_s after the recording's last sample take its value; later ones, points
    inside a silence and points before the first sample still have no target; a bad hold_s is refused."""
    t_s = np.r_[np.arange(0.0, 1.0, 0.01), np.arange(1.6, 2.0, 0.01)]  # silent from 0.99 to 1.6 s, ends at 1.99
    positions = np.stack([t_s, 2.0 * t_s], axis=1)
    offsets = np.arange(1, 9) * 0.05
    plain = chunk_targets(t_s, positions, 1.9, offsets)  # points at 1.95 ... 2.30 s
    assert np.isfinite(plain[0]).all() and np.isnan(plain[1:]).all()
    held = chunk_targets(t_s, positions, 1.9, offsets, hold_s=0.2)  # the last command, 1.99, holds to 2.19
    np.testing.assert_allclose(held[:5], np.vstack([plain[:1], np.tile(positions[-1], (4, 1))]), atol=1e-12)
    assert np.isnan(held[5:]).all()  # 2.20 s and later: past the hold
    assert np.isnan(chunk_targets(t_s, positions, 0.9, offsets, hold_s=5.0)[1:]).all()  # a silence stays silent
    assert np.isnan(chunk_targets(t_s, positions, -0.3, offsets, hold_s=5.0)[:5]).all()  # so does the time before
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="hold_s must be >= 0"):
            chunk_targets(t_s, positions, 1.9, offsets, hold_s=bad)


def test_chunk_targets_come_from_commands_when_the_bag_has_them():
    joints_t, joints = np.arange(10) * 0.01, np.zeros((10, 7))
    t, q, source = target_track(np.array([0.0, 0.01]), np.ones((2, 7)), joints_t, joints)
    assert source == "commands" and q[0, 0] == 1.0
    t, q, source = target_track(np.array([0.0]), np.ones((1, 7)), joints_t, joints)  # one command is not a trajectory
    assert source == "joint_states" and np.array_equal(t, joints_t) and np.array_equal(q, joints)
    assert target_track(np.array([0.0, 0.01]), np.ones((2, 7)), joints_t, joints, "joint_states")[2] == "joint_states"
    with pytest.raises(ValueError, match="target source"):
        target_track(joints_t, joints, joints_t, joints, "actions")


def handful_of_samples(config):
    """Four synthetic sequences of different lengths, two random target chunks each, collated (padded)."""
    sequences = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        stream = synthetic_stream(config, seconds=0.15, seed=seed)
        states = [o for o in stream if o.kind == Kind.STATE]
        chunks = [
            ChunkSpec(states[i].key, rng.uniform(-1, 1, (config.chunk_length, 7)).astype(np.float32)) for i in (-1, -6)
        ]
        sequences.append(build_sequence(config, stream, random_instruction(config, 3 + seed, seed).embeddings, chunks))
    return collate(sequences)


def test_overfits_a_handful_of_samples():
    torch.manual_seed(0)
    config = tiny_config()
    batch = handful_of_samples(config)  # different lengths: padding is exercised
    assert not bool(batch.valid.all())
    model = VLATransformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(400):  # noqa: B007 (the message after the loop names it)
        loss, info = model(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if info["loss"] < 1e-3:
            break
    assert info["num_targets"] == 4 * 2 * config.chunk_length
    assert info["loss"] < 1e-3, f"could not overfit 8 chunks: loss {info['loss']:.4f} after {step + 1} steps"


def test_the_action_loss_is_the_squared_or_the_absolute_error_of_the_same_predictions():
    """ModelConfig.action_loss: the same weights on the same batch give the mean squared ("mse") or the mean
    absolute ("l1") error of one set of normalised predictions over the valid targets; the reported "mae"
    (in joint units) does not depend on the loss."""
    torch.manual_seed(0)
    config = tiny_config(action_std=(0.5,) * 7, action_mean=(0.1,) * 7)
    batch = handful_of_samples(config)
    mse = VLATransformer(config)
    l1 = VLATransformer(config.replace(action_loss="l1"))
    l1.load_state_dict(mse.state_dict())
    with torch.no_grad():
        err = (mse.head(mse.full_pass(batch).hidden) - mse.normalize_actions(batch.targets))[batch.target_valid]
        (loss_mse, info_mse), (loss_l1, info_l1) = mse(batch), l1(batch)
    assert err.numel() == 4 * 2 * config.chunk_length * 7
    torch.testing.assert_close(loss_mse, err.pow(2).mean(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss_l1, err.abs().mean(), rtol=1e-5, atol=1e-7)
    assert float(loss_l1) != pytest.approx(float(loss_mse), rel=1e-3)
    assert info_l1["mae"] == pytest.approx(info_mse["mae"], rel=1e-6)


@pytest.fixture
def tiny_json(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(tiny_config().to_json())
    return path


def test_policy_bench_figures_are_what_its_timings_and_the_config_give(tiny_json, capsys, tmp_path):
    """Every timing figure recomputed from the bench's samples (``--raw``): one per timed tick and policy
    (6; 3 without the cache), per session tick and backend (6), per message admitted (10 joint states per
    100 ms tick; 18 or 19 frames at 30 Hz over the 0.6 s the timed ticks cover); percentiles, speedups
    and missed deadlines from them. The cache's size from the config alone (float32 keys and values per
    layer, key/value head, slot and head dimension). Exactness is measured against a full pass: the
    streamed and exported outputs must match it. Benchmarks print timings; no timing is held to a number."""
    from vla_ros.model.config import ModelConfig

    raw_path = tmp_path / "raw.json"
    assert (
        policy_bench.main(
            ["--json", "--config", str(tiny_json), "--ticks", "6", "--recompute-ticks", "3", "--raw", str(raw_path)]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    raw = json.loads(raw_path.read_text())
    config = ModelConfig.from_dict(json.loads(tiny_json.read_text()))

    def pct(values, q):
        return pytest.approx(np.percentile(values, q), abs=6e-4)  # the bench rounds to 0.001

    tick, chunk = raw["tick_ms"], raw["chunk_ms"]
    assert (
        {k: len(v) for k, v in tick.items()}
        == {k: len(v) for k, v in chunk.items()}
        == {"stream": 6, "onnx": 6, "torch_cpu": 6}
    )
    assert len(raw["recompute_ms"]) == len(raw["chunk_nocache_ms"]) == 3 and result["ticks"] == 6
    assert (result["tick_ms_p50_streaming"], result["tick_ms_p99_streaming"]) == (
        pct(tick["stream"], 50),
        pct(tick["stream"], 99),
    )
    assert (result["tick_ms_p50_recompute"], result["tick_ms_p99_recompute"]) == (
        pct(raw["recompute_ms"], 50),
        pct(raw["recompute_ms"], 99),
    )
    assert (result["chunk_ms_p50_kv"], result["chunk_ms_p99_kv"]) == (
        pct(chunk["stream"], 50),
        pct(chunk["stream"], 99),
    )
    assert result["chunk_ms_p50_nocache"] == pct(raw["chunk_nocache_ms"], 50)
    assert result["streaming_speedup"] == pytest.approx(
        result["tick_ms_p50_recompute"] / result["tick_ms_p50_streaming"], abs=0.0051
    )
    assert result["kv_decode_speedup"] == pytest.approx(
        result["chunk_ms_p50_nocache"] / result["chunk_ms_p50_kv"], abs=0.0051
    )
    assert result["missed_deadlines"] == sum(
        a + b > 1e3 / config.camera_rate_hz for a, b in zip(tick["stream"], chunk["stream"])
    )
    assert (result["onnx_cpu_ms_p50"], result["onnx_cpu_chunk_ms_p50"]) == (
        pct(tick["onnx"], 50),
        pct(chunk["onnx"], 50),
    )
    assert (result["torch_cpu_ms_p50"], result["torch_cpu_chunk_ms_p50"]) == (
        pct(tick["torch_cpu"], 50),
        pct(chunk["torch_cpu"], 50),
    )
    session, intake = raw["session_tick_ms"], raw["intake_us"]
    assert {k: len(v) for k, v in session.items()} == {"onnx": 6, "torch": 6}
    for backend in ("onnx", "torch"):
        assert result[f"session_tick_ms_p50_{backend}"] == pct(session[backend], 50)
        assert result[f"session_tick_ms_p99_{backend}"] == pct(session[backend], 99)
    joint_states, images = intake["sensor_msgs/msg/JointState"], intake["sensor_msgs/msg/Image"]
    assert len(joint_states) == 60 and len(images) in (18, 19), (len(joint_states), len(images))
    assert result["intake_us_p50_joint_state"] == pct(joint_states, 50) and result[
        "intake_us_p50_image_320x240"
    ] == pct(images, 50)
    assert result["cache_capacity_tokens"] == config.cache_capacity
    kv_bytes = 2 * config.num_hidden_layers * config.num_key_value_heads * config.cache_capacity * config.head_dim * 4
    assert result["cache_mb"] == pytest.approx(kv_bytes / 2**20, abs=6e-4)
    assert result["max_abs_diff_streaming"] < 1e-4 and result["max_abs_diff_onnx_torch"] < 1e-4
    assert result["session_max_abs_diff_onnx_torch"] < 1e-4  # the node's chunks, either backend


def test_gpu_check_runs_without_a_gpu(capsys):
    assert gpu_check.main([]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ok"] and "environment" in result
    if not torch.cuda.is_available():
        assert "CUDA is not available" in result["skipped"]


def test_the_keypoint_temperature_stays_positive():
    """Stored as a log: no optimiser step can push it through zero (a raw scalar under Adam at 3e-3 crossed
    zero in about 50 steps, after which the spatial softmax picks the weakest pixel)."""
    model = VLATransformer(tiny_config())
    encoder = model.patch_encoder
    assert encoder.keypoint_temperature.item() == pytest.approx(0.05)
    optimizer = torch.optim.SGD([encoder.keypoint_log_temperature], lr=1000.0)
    encoder.keypoint_temperature.sum().backward()  # a gradient that wants it smaller, and a huge step
    optimizer.step()
    assert 0.0 < encoder.keypoint_temperature.item() < 1e-10


def test_model_files_with_a_raw_keypoint_temperature_still_load(tmp_path):
    """The shipped model's temperature is what its file stores (a log, or a raw value in folders saved
    before it became one) and its two backends agree; a folder with a raw value (written here) loads
    unchanged; a non-positive stored temperature is refused with the reason."""
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    from vla_ros.model.io import ModelFileError, check_onnx, load_model, save_model, sha256_file
    from vla_ros.model.runtime import StreamingPolicy

    shipped = Path(__file__).resolve().parents[1] / "models" / "vla_cups"
    stored = load_file(str(shipped / "model.safetensors"))
    if "patch_encoder.keypoint_temperature" in stored:
        expected = stored["patch_encoder.keypoint_temperature"].item()
    else:
        expected = float(np.exp(stored["patch_encoder.keypoint_log_temperature"].item()))
    assert load_model(shipped).patch_encoder.keypoint_temperature.item() == pytest.approx(expected, rel=1e-6)
    check_onnx(shipped)  # its ONNX export still belongs to its weights
    config = load_model(shipped).config
    text = random_instruction(config, 6, 0).embeddings
    chunks = []
    for backend in ("torch", "onnx"):
        policy = StreamingPolicy.from_pretrained(shipped, backend=backend, device="cpu")
        policy.set_instruction(text)
        policy.observe(synthetic_stream(config, seconds=0.4, seed=1))
        chunks.append(policy.predict_action_chunk().positions)
    np.testing.assert_allclose(chunks[0], chunks[1], atol=1e-5)
    # a legacy file written here: the raw value in, the same temperature out; a negative one refused
    torch.manual_seed(0)
    folder = save_model(VLATransformer(tiny_config()), tmp_path / "old")
    for value, ok in ((0.07, True), (-0.07, False)):
        tensors = load_file(str(folder / "model.safetensors"))
        tensors.pop("patch_encoder.keypoint_log_temperature", None)
        tensors["patch_encoder.keypoint_temperature"] = torch.tensor([value])
        save_file(tensors, str(folder / "model.safetensors"))
        data = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(
            json.dumps({**data, "weights_sha256": sha256_file(folder / "model.safetensors")})
        )
        if ok:
            assert load_model(folder).patch_encoder.keypoint_temperature.item() == pytest.approx(0.07, rel=1e-6)
        else:
            with pytest.raises(ModelFileError, match="keypoint_temperature = \\[-0.07.*is not positive"):
                load_model(folder)
