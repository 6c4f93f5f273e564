"""Streaming runtime vs one full forward pass: exact over streams of many windows with evictions, at the window
boundary, with late and duplicate observations, after a new instruction, after 1.7e9 s of clock; bounded memory."""

import logging

import numpy as np
import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)

from vla_ros.model import PolicyNotReady, StreamingPolicy, VLATransformer, tiny_config
from vla_ros.model.check import compare_with_full_pass, full_pass_outputs, record_stream
from vla_ros.model.synthetic import random_instruction, shifted, synthetic_stream, ticks
from vla_ros.tokens.types import Kind, Observation

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

TOL = 1e-4
EPOCH_NS = 1_700_000_000 * 10**9


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return _conditioned(VLATransformer(tiny_config()).eval())


@pytest.fixture(scope="module")
def wrist_model():
    """Two cameras (main view + wrist), each its own 30 Hz stream of frames."""
    torch.manual_seed(1)
    return _conditioned(VLATransformer(tiny_config(cameras=("camera", "wrist_camera"))).eval())


def _conditioned(model):
    with torch.no_grad():  # zero at init: give the instruction conditioning weights so it is exercised
        model.instruction_proj.weight.normal_(0.0, 0.05)
        model.patch_encoder.film.weight.normal_(0.0, 0.05)
        model.patch_encoder.mean_image.normal_(0.0, 0.1)
        if model.camera_embedding is not None:
            model.camera_embedding.weight.normal_(0.0, 0.5)
    return model


def _policy(model, instruction=None):
    policy = StreamingPolicy.from_model(model, "cpu")
    policy.set_instruction(instruction if instruction is not None else random_instruction(model.config, 6))
    return policy


def _groups(stream, how):
    if how == "one_by_one":
        return [[o] for o in stream]
    if how == "ticks":
        return ticks(stream)
    return [stream[i : i + 60] for i in range(0, len(stream), 60)]  # big batches: several steps per call


@pytest.mark.parametrize("how", ["one_by_one", "ticks", "batches"])
@pytest.mark.parametrize("cameras", [1, 2])
def test_streaming_equals_full_pass_over_many_windows(model, wrist_model, how, cameras):
    model = wrist_model if cameras == 2 else model
    config = model.config
    stream = synthetic_stream(config, seconds=0.8, seed=1, start_ns=EPOCH_NS)  # 8 windows of 0.1 s
    span = (stream[-1].stamp_ns - stream[0].stamp_ns) / 1e9
    assert span >= 5 * config.window_seconds
    stamps = np.array([o.stamp_ns for o in stream if o.kind == Kind.STATE])
    assert np.any(np.isin(stamps + config.window_ns, stamps))  # pairs exactly W apart: the boundary is exercised
    policy = _policy(model)
    groups = _groups(stream, how)
    peak = 0
    hidden, chunks = {}, []
    for i, group in enumerate(groups):
        decode = i % 3 == 2 or len(groups) < 10
        record_stream(policy, [group], chunk_after=[0] if decode else [], hidden=hidden, chunks=chunks)
        peak = max(peak, policy.cached_tokens)
    assert len(hidden) > 2 * policy.capacity and peak <= policy.capacity  # so tokens were evicted
    diff = compare_with_full_pass(model, stream, policy.instruction.embeddings, hidden, chunks)
    assert diff < TOL, diff
    assert len(chunks) >= 2


def _stream_chunks(model, stream, instruction, every=4):
    policy = _policy(model, instruction)
    _, chunks = record_stream(policy, ticks(stream), chunk_after=range(every - 1, 10**6, every))
    return np.stack([c.positions for _, c in chunks]), np.stack([c.hidden for _, c in chunks])


@pytest.mark.parametrize("shift_s", [1.7e9, 86_400.0])
def test_time_shift_invariance(model, shift_s):
    config = model.config
    instruction = random_instruction(config, 6)
    stream = synthetic_stream(config, seconds=0.6, seed=2, start_ns=0)
    pos0, hid0 = _stream_chunks(model, stream, instruction)
    pos1, hid1 = _stream_chunks(model, shifted(stream, int(shift_s * 1e9)), instruction)
    assert np.abs(pos1 - pos0).max() < TOL and np.abs(hid1 - hid0).max() < TOL


def test_outputs_depend_on_time_differences(model):
    config = model.config
    instruction = random_instruction(config, 6)
    stream = synthetic_stream(config, seconds=0.4, seed=3, start_ns=EPOCH_NS)
    stretched = [
        Observation(o.kind, EPOCH_NS + (o.stamp_ns - EPOCH_NS) * 3 // 4, o.t_s, o.seq, o.data, o.source) for o in stream
    ]
    pos0, hid0 = _stream_chunks(model, stream, instruction)
    pos1, hid1 = _stream_chunks(model, stretched, instruction)
    assert (
        np.abs(pos1 - pos0).max() > 1e-4 and np.abs(hid1 - hid0).max() > 1e-3
    )  # same tokens, other spacing: time matters


def test_late_observations_are_inserted_exactly(model):
    config = model.config
    stream = synthetic_stream(config, seconds=0.7, seed=4, start_ns=EPOCH_NS)
    # Frames arrive 35 ms after joint states stamped at the same time (lateness allowance is 50 ms).
    arrival = sorted(stream, key=lambda o: o.stamp_ns + (35_000_000 if o.kind == Kind.IMAGE else 0))
    policy = _policy(model)
    hidden, replayed = {}, 0
    for obs in arrival:
        report = policy.observe(obs, return_hidden=True)
        replayed += report.replayed
        assert report.dropped_late == 0
        for h, key, patch in zip(report.hidden, report.token_keys, report.token_patch):
            hidden[(key, int(patch))] = h
    assert replayed > 50
    _, chunks = record_stream(policy, [[]], chunk_after=[0])
    diff = compare_with_full_pass(model, stream, policy.instruction.embeddings, hidden, chunks)
    assert diff < TOL, diff


def test_too_late_and_duplicate_observations_are_dropped(model):
    config = model.config
    stream = synthetic_stream(config, seconds=0.5, seed=5, start_ns=EPOCH_NS)
    too_late = stream[len(stream) // 2]
    rest = [o for o in stream if o is not too_late]
    policy = _policy(model)
    hidden, _ = record_stream(policy, ticks(rest))
    report = policy.observe([too_late, rest[-1]], return_hidden=True)  # older than newest - 50 ms, and a repeat
    assert report.dropped_late == 1 and report.duplicates == 1 and report.accepted == 0
    assert policy.total_dropped_late == 1
    _, chunks = record_stream(policy, [[]], chunk_after=[0])
    assert compare_with_full_pass(model, rest, policy.instruction.embeddings, hidden, chunks) < TOL


def test_new_instruction_rebuilds_from_the_retained_window(model):
    config = model.config
    stream = synthetic_stream(config, seconds=0.6, seed=6, start_ns=EPOCH_NS)
    tick_list = ticks(stream)
    k = len(tick_list) // 2
    policy = _policy(model, random_instruction(config, 6, seed=1))
    record_stream(policy, tick_list[:k])
    retained = policy.raw_observations()
    newest = policy.newest_key[0]
    assert all(newest - o.stamp_ns <= config.window_ns + config.max_lateness_ns for o in retained)
    second = random_instruction(config, 8, seed=2, text="pick up the blue cup")
    policy.set_instruction(second)
    hidden, chunks = record_stream(policy, tick_list[k:], chunk_after=range(0, 100, 3))
    after = [o for t in tick_list[k:] for o in t]
    ref_hidden, ref_chunks = full_pass_outputs(model, retained + after, second.embeddings, [a for a, _ in chunks])
    diff = max(float(np.abs(hidden[key] - ref_hidden[key]).max()) for key in hidden)
    for (_, chunk), (positions, _) in zip(chunks, ref_chunks):
        diff = max(diff, float(np.abs(chunk.positions - positions).max()))
    assert diff < TOL, diff
    assert policy.instruction is second


def test_memory_is_bounded_whatever_the_uptime(model):
    config = model.config
    policy = _policy(model)
    mb = policy.cache_mb
    raw_peak = 0
    for tick in ticks(synthetic_stream(config, seconds=3.0, seed=7, start_ns=EPOCH_NS)):  # 30 windows
        policy.select_action(tick)
        assert policy._end <= policy.capacity and policy.cached_tokens <= policy.capacity
        raw_peak = max(raw_peak, len(policy.raw_observations()))
    assert policy.cache_mb == mb and policy.total_overflow_tokens == 0
    assert raw_peak <= (config.window_seconds + config.max_lateness_s) * (30 + 100) + 4


def test_cache_overflow_evicts_early_and_says_so(caplog):
    torch.manual_seed(0)
    config = tiny_config(max_cache_tokens=8 + 4 * 6)  # far below a window at 30 Hz + 100 Hz
    policy = _policy(VLATransformer(config).eval())
    with caplog.at_level(logging.WARNING, logger="vla_ros.model.runtime"):
        for tick in ticks(synthetic_stream(config, seconds=0.5, seed=8)):
            chunk = policy.select_action(tick)
            assert policy._end <= policy.capacity
    assert policy.total_overflow_tokens > 0 and "KV cache full" in caplog.text
    assert np.all(np.isfinite(chunk.positions))


def test_chunk_decoding_leaves_the_cache_untouched(model):
    config = model.config
    stream = synthetic_stream(config, seconds=0.4, seed=9, start_ns=EPOCH_NS)
    a, b = _policy(model), _policy(model)
    ha, _ = record_stream(a, ticks(stream), chunk_after=range(100))
    hb, _ = record_stream(b, ticks(stream))
    assert all(np.array_equal(ha[k], hb[k]) for k in hb)
    c1, c2 = a.predict_action_chunk(), a.predict_action_chunk()
    assert np.array_equal(c1.positions, c2.positions)


def test_select_action_equals_observe_then_predict(model):
    config = model.config
    a, b = _policy(model), _policy(model)
    for tick in ticks(synthetic_stream(config, seconds=0.4, seed=10, start_ns=EPOCH_NS)):
        fused = a.select_action(tick)
        b.observe(tick)
        plain = b.predict_action_chunk()
        assert fused.stamp_ns == plain.stamp_ns
        assert np.abs(fused.positions - plain.positions).max() < 1e-5


def test_chunk_contract(model):
    config = model.config
    policy = _policy(model)
    with pytest.raises(PolicyNotReady):
        policy.predict_action_chunk()
    stream = synthetic_stream(config, seconds=0.2, seed=11, start_ns=EPOCH_NS)
    chunk = policy.select_action(stream)
    newest = max(stream, key=lambda o: o.key)
    assert chunk.stamp_ns == newest.stamp_ns and chunk.t_s == newest.t_s
    np.testing.assert_allclose(chunk.time_from_start_s, (np.arange(config.chunk_length) + 1) / config.chunk_rate_hz)
    assert chunk.positions.shape == (config.chunk_length, 7) and chunk.joint_names == config.joint_names


def test_reset_forgets_observations(model):
    config = model.config
    instruction = random_instruction(config, 6)
    stream = synthetic_stream(config, seconds=0.3, seed=12, start_ns=EPOCH_NS)
    used = _policy(model, instruction)
    used.select_action(synthetic_stream(config, seconds=0.3, seed=13, start_ns=EPOCH_NS))
    used.reset()
    assert not used.ready and used.instruction is instruction
    fresh = _policy(model, instruction)
    assert np.array_equal(used.select_action(stream).positions, fresh.select_action(stream).positions)


def test_bad_inputs_are_rejected_with_the_field(model):
    config = model.config
    policy = _policy(model)
    bad_image = Observation(Kind.IMAGE, 0, 0.0, 0, np.zeros((3, 10, 10), np.float32), "/camera/image_raw")
    with pytest.raises(ValueError, match=r"data shape \(3, 10, 10\) != expected \(3, 16, 24\)"):
        policy.observe(bad_image)
    bad_state = Observation(Kind.STATE, 0, 0.0, 0, np.full(14, np.nan, np.float32), "/joint_states")
    with pytest.raises(ValueError, match="non-finite"):
        policy.observe(bad_state)
    with pytest.raises(ValueError, match="max_text_tokens"):
        policy.set_instruction(np.zeros((config.max_text_tokens + 1, 384), np.float32))
    with pytest.raises(ValueError, match=r"\(L, 384\)"):
        policy.set_instruction(np.zeros((4, 300), np.float32))


def test_the_instruction_conditions_every_camera_patch(model):
    """Same frames, another instruction: the patch tokens' own outputs change (FiLM from the instruction
    vector), not only what later tokens read from the word tokens."""
    config = model.config
    stream = synthetic_stream(config, seconds=0.2, seed=9, start_ns=EPOCH_NS)
    outs = []
    for seed in (1, 2):
        policy = _policy(model, random_instruction(config, 6, seed=seed))
        hidden = {}
        for obs in stream:
            report = policy.observe(obs, return_hidden=True)
            for h, key, patch in zip(report.hidden, report.token_keys, report.token_patch):
                hidden[(key, int(patch))] = h
        outs.append(hidden)
    first_patch = min(k for k in outs[0] if k[0][1] == Kind.IMAGE)
    assert np.abs(outs[0][first_patch] - outs[1][first_patch]).max() > 1e-3


def test_each_camera_is_its_own_stream_and_the_model_knows_which(wrist_model):
    """Two cameras: twice the frames, each with its camera index; the same pixels from the other camera give
    other outputs (the per-camera embedding), and a camera the model does not have is refused."""
    import dataclasses

    config = wrist_model.config
    stream = synthetic_stream(config, seconds=0.3, seed=4, start_ns=EPOCH_NS)
    frames = [o for o in stream if o.kind == Kind.IMAGE]
    assert sorted({o.camera for o in frames}) == [0, 1]
    assert sum(o.camera == 1 for o in frames) == sum(o.camera == 0 for o in frames) == 9
    assert {o.source for o in frames if o.camera == 1} == {"/wrist_camera/image_raw"}
    # The same pixels as camera 0 and as camera 1: the patch tokens differ by the two camera embeddings.
    images = torch.from_numpy(np.stack([frames[0].data, frames[0].data]))
    P, D = config.num_visual_tokens, config.hidden_size
    gather = torch.arange(1, 2 * P + 1)[None]
    with torch.no_grad():
        x, _, _ = wrist_model.embed(
            images,
            torch.zeros(0, config.state_dim),
            torch.zeros(0, 384),
            torch.zeros(0, dtype=torch.int64),
            gather,
            torch.zeros(1, 384),
            image_camera=torch.tensor([0, 1]),
        )
        want = wrist_model.camera_embedding.weight[1] - wrist_model.camera_embedding.weight[0]
    assert torch.allclose(x[0, P:] - x[0, :P], want.expand(P, D), atol=1e-5)
    assert float(want.abs().max()) > 0.1
    instruction = random_instruction(config, 6)
    policy = _policy(wrist_model, instruction)
    with pytest.raises(ValueError, match="camera 2 is not one of the model's cameras"):
        policy.observe([dataclasses.replace(frames[0], camera=2)])


def _relative_twin(model):
    """The same weights with state-relative chunks (ModelConfig.relative_actions)."""
    twin = VLATransformer(model.config.replace(relative_actions=True)).eval()
    twin.load_state_dict(model.state_dict())
    twin.patch_encoder.mean_image.copy_(model.patch_encoder.mean_image)
    return twin


def test_a_state_relative_chunk_is_the_offsets_plus_the_newest_joint_state(model):
    """Each chunk of a state-relative model is what the same weights decode plus the positions (not the
    velocities) of the newest joint state at or before the chunk's anchor; streamed, it still equals one
    full pass."""
    config, twin = model.config, _relative_twin(model)
    instruction = random_instruction(config, 6)
    stream = synthetic_stream(config, seconds=0.4, seed=21, start_ns=EPOCH_NS)
    absolute, relative = _policy(model, instruction), _policy(twin, instruction)
    n, seen, checked = len(config.joint_names), [], 0
    for tick in ticks(stream):
        seen += tick
        a = absolute.select_action(tick)
        states = [o for o in sorted(seen, key=lambda o: o.key) if o.kind == Kind.STATE]
        if not states:  # the first frame came before any joint state: nothing to be relative to
            with pytest.raises(PolicyNotReady):
                relative.select_action(tick)
            continue
        r, newest_state = relative.select_action(tick), states[-1]
        assert not np.allclose(newest_state.data[:n], newest_state.data[n:])
        np.testing.assert_allclose(
            r.positions - a.positions, np.broadcast_to(newest_state.data[:n], a.positions.shape), atol=1e-6
        )
        checked += 1
    assert checked >= 5
    groups = ticks(stream)
    first = next(i for i, g in enumerate(groups) if any(o.kind == Kind.STATE for o in g))
    hidden, chunks = record_stream(_policy(twin, instruction), groups, chunk_after=range(first, 100))
    assert compare_with_full_pass(twin, stream, instruction.embeddings, hidden, chunks) < TOL


def test_a_state_relative_model_without_a_joint_state_refuses_and_stays_exact(model):
    """Frames alone: no reference, so no chunk (PolicyNotReady), and the tick's tokens still enter the cache
    consistently: once joint states arrive the chunk equals a fresh policy's over the same observations."""
    config, twin = model.config, _relative_twin(model)
    instruction = random_instruction(config, 6)
    stream = synthetic_stream(config, seconds=0.3, seed=22, start_ns=EPOCH_NS)
    third_frame = [o for o in stream if o.kind == Kind.IMAGE][2]
    stream = [o for o in stream if o.kind == Kind.IMAGE or o.stamp_ns > third_frame.stamp_ns]
    frames_only = [o for o in stream if o.key <= third_frame.key]
    assert frames_only and all(o.kind == Kind.IMAGE for o in frames_only)
    policy = _policy(twin, instruction)
    with pytest.raises(PolicyNotReady, match="joint state"):
        policy.select_action(frames_only)
    with pytest.raises(PolicyNotReady, match="joint state"):
        policy.predict_action_chunk()
    chunk = policy.select_action(stream[len(frames_only) :])
    fresh = _policy(twin, instruction).select_action(stream)
    assert chunk.stamp_ns == fresh.stamp_ns
    np.testing.assert_allclose(chunk.positions, fresh.positions, atol=TOL)
