"""Training path: forward(batch) -> (loss, info) overfits a handful of samples (catches target shift, mask and
padding mistakes), chunk targets sit at anchor + (k + 1) / rate; and the benchmarks' command lines."""

import json

import numpy as np
import pytest
import torch

from vla_ros.bench import gpu_check, policy_bench
from vla_ros.model import ChunkSpec, ModelConfig, VLATransformer, build_sequence, chunk_targets, collate, tiny_config
from vla_ros.model.synthetic import random_instruction, synthetic_stream
from vla_ros.tokens.types import Kind
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)


def test_chunk_targets_are_the_future_positions():
    config = ModelConfig()  # 16 points at 20 Hz
    times = np.arange(0, 3_000_000_000, 10_000_000, dtype=np.int64) + 1_700_000_000 * 10**9
    t_s = (times - times[0]) / 1e9
    positions = np.stack([0.1 * j + 0.5 * t_s for j in range(7)], axis=1)  # q_j(t) = 0.1 j + 0.5 t
    anchor = int(times[100]) + 3_000_000  # between two samples
    targets = chunk_targets(config, times, positions, anchor)
    k = np.arange(config.chunk_length)
    expected_t = (anchor - times[0]) / 1e9 + (k + 1) / config.chunk_rate_hz
    np.testing.assert_allclose(targets[:, 3], 0.3 + 0.5 * expected_t, atol=1e-6)
    late = chunk_targets(config, times, positions, int(times[-30]))  # 290 ms of recording left
    assert np.isfinite(late[:5]).all() and np.isnan(late[6:]).all()  # past the recording: no target


def test_overfits_a_handful_of_samples():
    torch.manual_seed(0)
    config = tiny_config()
    sequences = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        stream = synthetic_stream(config, seconds=0.15, seed=seed)
        states = [o for o in stream if o.kind == Kind.STATE]
        chunks = [ChunkSpec(states[i].key, rng.uniform(-1, 1, (config.chunk_length, 7)).astype(np.float32))
                  for i in (-1, -6)]
        sequences.append(build_sequence(config, stream, random_instruction(config, 3 + seed, seed).embeddings, chunks))
    batch = collate(sequences)  # different lengths: padding is exercised
    assert not bool(batch.valid.all())
    model = VLATransformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(400):
        loss, info = model(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if info["loss"] < 1e-3:
            break
    assert info["num_targets"] == 4 * 2 * config.chunk_length
    assert info["loss"] < 1e-3, f"could not overfit 8 chunks: loss {info['loss']:.4f} after {step + 1} steps"


@pytest.fixture
def tiny_json(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(tiny_config().to_json())
    return path


def test_policy_bench_prints_the_figures(tiny_json, capsys):
    assert policy_bench.main(["--json", "--config", str(tiny_json), "--ticks", "6", "--recompute-ticks", "3"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("tick_ms_p50_streaming", "tick_ms_p50_recompute", "streaming_speedup", "chunk_ms_p50_kv",
                "chunk_ms_p50_nocache", "kv_decode_speedup", "onnx_cpu_ms_p50", "torch_cpu_ms_p50",
                "max_abs_diff_streaming", "cache_mb", "session_tick_ms_p50_onnx", "session_tick_ms_p50_torch",
                "intake_us_p50_joint_state", "intake_us_p50_image_320x240"):
        assert key in result, key
    assert result["max_abs_diff_streaming"] < 1e-4 and result["max_abs_diff_onnx_torch"] < 1e-4
    assert result["session_max_abs_diff_onnx_torch"] < 1e-4  # the node's chunks, either backend
    assert result["cache_mb"] > 0


def test_gpu_check_runs_without_a_gpu(capsys):
    assert gpu_check.main([]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ok"] and "environment" in result
    if not torch.cuda.is_available():
        assert "CUDA is not available" in result["skipped"]
