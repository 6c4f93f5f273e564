"""The pinned frame (ModelConfig.pin_first_frame): the first main-camera frame after a reset stays visible to every
later token beyond the window; the streamed outputs equal one full pass; a reset or an earlier frame re-pins."""

import dataclasses

import numpy as np
import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)

from vla_ros.model import StreamingPolicy, VLATransformer, tiny_config
from vla_ros.model.check import compare_with_full_pass, record_stream
from vla_ros.model.config import ModelConfig
from vla_ros.model.sequence import build_sequence, pinned_frame
from vla_ros.model.synthetic import random_instruction, synthetic_stream, ticks
from vla_ros.model.timeline import TokenTimes, visibility
from vla_ros.tokens.types import Kind

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

TOL = 1e-4
EPOCH_NS = 1_700_000_000 * 10**9


def _model(pin: bool, seed: int = 0) -> VLATransformer:
    torch.manual_seed(seed)
    model = VLATransformer(tiny_config(pin_first_frame=pin)).eval()
    with torch.no_grad():  # zero or small at init: make the conditioning and the pin's embedding count
        model.instruction_proj.weight.normal_(0.0, 0.05)
        model.patch_encoder.film.weight.normal_(0.0, 0.05)
        if model.camera_embedding is not None:
            model.camera_embedding.weight.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module")
def pinned_model():
    return _model(True)


def _policy(model, instruction):
    policy = StreamingPolicy.from_model(model, "cpu")
    policy.set_instruction(instruction)
    return policy


def test_the_pinned_frame_is_seen_by_every_observation_and_chunk_beyond_the_window_and_not_by_text(pinned_model):
    config = pinned_model.config
    stream = synthetic_stream(config, seconds=0.5, seed=1, start_ns=EPOCH_NS)
    first = pinned_frame(stream)
    assert first is stream[0] and first.kind == Kind.IMAGE  # the frame at offset 0
    last_state = [o for o in stream if o.kind == Kind.STATE][-1]
    from vla_ros.model.sequence import ChunkSpec

    seq = build_sequence(
        config, stream, random_instruction(config, 3).embeddings, [ChunkSpec(last_state.key)], pinned=first
    )
    times = TokenTimes(seq.kind, seq.stamp_ns, seq.order, seq.chunk, np.ones(seq.num_tokens, bool))
    allowed = visibility(times, times, config.window_ns)
    P, L = config.num_visual_tokens, 3
    pin = slice(L, L + P)
    assert np.all(seq.rope_ns[pin] == first.stamp_ns) and np.all(seq.image_camera[0] == config.pinned_camera)
    later = np.arange(L + P, seq.num_tokens)
    assert np.all(allowed[later][:, pin])  # every observation and action token sees the pin ...
    old = [t for t in later if seq.kind[t] == Kind.IMAGE and seq.token_obs[t] == 0]  # ... and the same frame in
    assert old and not allowed[-1, old].any()  # the window is out of the last chunk's sight (0.5 s > W = 0.1 s)
    assert not allowed[:L, pin].any()  # text sees text only
    assert allowed[pin][:, :L].all() and allowed[pin][:, pin].all() and not allowed[pin][:, L + P :].any()


def test_the_pin_carries_the_first_frame_into_every_later_chunk(pinned_model):
    """Two streams that differ only in the first frame: 0.5 s later (five windows, past the two layers'
    reach) the pinned model's chunks differ; the same weights without the pin give identical chunks."""
    config = pinned_model.config
    stream = synthetic_stream(config, seconds=0.6, seed=2, start_ns=EPOCH_NS)
    other = [dataclasses.replace(stream[0], data=-stream[0].data)] + stream[1:]
    instruction = random_instruction(config, 5)
    unpinned = VLATransformer(config.replace(pin_first_frame=False)).eval()
    state = {k: v for k, v in pinned_model.state_dict().items() if k != "camera_embedding.weight"}
    unpinned.load_state_dict(state)
    late = {}
    for name, model in (("pinned", pinned_model), ("unpinned", unpinned)):
        outs = []
        for s in (stream, other):
            policy = _policy(model, instruction)
            for tick in ticks(s):
                policy.observe(tick)
            outs.append(policy.predict_action_chunk(return_hidden=True).hidden)  # the chunk's hidden states
        late[name] = float(np.abs(outs[0] - outs[1]).max())
    assert late["unpinned"] == 0.0, late
    assert late["pinned"] > 1e-5, late  # random weights: a small effect, but exactly none without the pin


@pytest.mark.parametrize("how", ["one_by_one", "ticks", "frames_late"])
def test_streaming_with_a_pin_equals_the_full_pass(pinned_model, how):
    config = pinned_model.config
    stream = synthetic_stream(config, seconds=0.8, seed=3, start_ns=EPOCH_NS)
    if how == "one_by_one":
        groups = [[o] for o in stream]
    elif how == "ticks":
        groups = ticks(stream)
    else:  # frames 30 ms late: states come first, the pin arrives after them, and the cache is rebuilt
        groups = [[o] for o in sorted(stream, key=lambda o: o.stamp_ns + (30_000_000 if o.kind == Kind.IMAGE else 0))]
    policy = _policy(pinned_model, random_instruction(config, 6))
    hidden, chunks = {}, []
    frames = 0
    for group in groups:
        # a chunk after every third frame: then every observation stamped before its anchor has arrived
        frames += group[-1].kind == Kind.IMAGE
        decode = group[-1].kind == Kind.IMAGE and frames % 3 == 0
        record_stream(policy, [group], chunk_after=[0] if decode else [], hidden=hidden, chunks=chunks)
        assert policy.cached_tokens <= policy.capacity
    assert policy.pinned is stream[0]
    assert len(hidden) > 2 * policy.capacity  # tokens were evicted; the pin was not
    assert len(chunks) >= 5
    assert compare_with_full_pass(pinned_model, stream, policy.instruction.embeddings, hidden, chunks) < TOL


def test_reset_unpins_and_the_next_first_frame_pins(pinned_model):
    config = pinned_model.config
    instruction = random_instruction(config, 6)
    before = synthetic_stream(config, seconds=0.3, seed=4, start_ns=EPOCH_NS)
    after = synthetic_stream(config, seconds=0.3, seed=5, start_ns=EPOCH_NS + 10**9)
    used = _policy(pinned_model, instruction)
    used.select_action(before)
    assert used.pinned is before[0]
    used.reset()
    assert used.pinned is None and not used.ready
    states_first = [o for o in after if o.kind == Kind.STATE][:3]
    used.observe(states_first)  # joint states alone do not pin
    assert used.pinned is None
    fresh = _policy(pinned_model, instruction)
    fresh.observe(states_first)
    rest = [o for o in after if o not in states_first]
    assert np.array_equal(used.select_action(rest).positions, fresh.select_action(rest).positions)
    assert used.pinned is fresh.pinned is after[0]


def test_an_earlier_main_camera_frame_arriving_late_takes_the_pin(pinned_model):
    config = pinned_model.config
    stream = synthetic_stream(config, seconds=0.3, seed=6, start_ns=EPOCH_NS)
    frames = [o for o in stream if o.kind == Kind.IMAGE]
    late_first = [o for o in stream if o is not frames[0]]
    policy = _policy(pinned_model, random_instruction(config, 6))
    hidden, chunks = record_stream(policy, [late_first[:6]])
    assert policy.pinned is frames[1]
    record_stream(policy, [[frames[0]], late_first[6:]], chunk_after=[1], hidden=hidden, chunks=chunks)
    assert policy.pinned is frames[0]
    assert compare_with_full_pass(pinned_model, stream, policy.instruction.embeddings, hidden, chunks) < TOL


def test_the_option_is_checked_and_kept_in_config_json(tmp_path):
    from vla_ros.model.io import load_config, save_model

    with pytest.raises(ValueError, match="pin_first_frame='yes' must be true or false"):
        tiny_config(pin_first_frame="yes")
    plain = tiny_config()
    assert plain.frame_embeddings == 0 and plain.prefix_tokens == plain.max_text_tokens
    pinned = tiny_config(pin_first_frame=True)
    assert pinned.frame_embeddings == 2 and pinned.prefix_tokens == plain.max_text_tokens + pinned.num_visual_tokens
    assert pinned.cache_capacity == plain.cache_capacity + pinned.num_visual_tokens
    save_model(VLATransformer(pinned), tmp_path / "m")
    assert load_config(tmp_path / "m").pin_first_frame is True
    assert ModelConfig().pin_first_frame is False  # models saved before the option load without a pin
    stream = synthetic_stream(plain, seconds=0.1, seed=7)
    with pytest.raises(ValueError, match="without pin_first_frame"):
        build_sequence(plain, stream, pinned=stream[0])
    state = next(o for o in stream if o.kind == Kind.STATE)
    with pytest.raises(ValueError, match="must be a frame of the main camera, not STATE"):
        build_sequence(pinned, stream, pinned=state)
