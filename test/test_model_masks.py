"""The attention rule and its use: worked example, window boundary, masked weights exactly zero, rows sum to
one, padding never attended and never in the loss, time-RoPE depends on time differences only."""

import numpy as np
import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)

from vla_ros.model import VLATransformer, tiny_config
from vla_ros.model.layers import rotate
from vla_ros.model.sequence import ChunkSpec, build_sequence, collate
from vla_ros.model.synthetic import random_instruction, synthetic_stream
from vla_ros.model.timeline import ACTION, IMAGE, STATE, TEXT, TokenTimes, rope_tables, rope_tables_np, visibility

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

MS = 1_000_000


def test_worked_example_from_the_docstring():
    # text, S@0, I@20 (two patches), S@90, S@130, A(+100), A(+200) anchored on S@130; W = 100 ms.
    kind = np.array([TEXT, STATE, IMAGE, IMAGE, STATE, STATE, ACTION, ACTION])
    stamp = np.array([0, 0, 20, 20, 90, 130, 130, 130]) * MS
    order = np.array([-1, 0, 1, 1, 2, 3, 3, 3])
    chunk = np.array([-1, -1, -1, -1, -1, -1, 0, 0])
    t = TokenTimes(kind, stamp, order, chunk, np.ones(8, bool))
    got = visibility(t, t, 100 * MS).astype(int)
    want = np.array(
        [
            [1, 0, 0, 0, 0, 0, 0, 0],  # text sees text only
            [1, 1, 0, 0, 0, 0, 0, 0],  # S@0
            [1, 1, 1, 1, 0, 0, 0, 0],  # I@20 patch 0: bidirectional inside its frame
            [1, 1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0, 0],  # S@90: 90 - 0 <= 100
            [1, 0, 0, 0, 1, 1, 0, 0],  # S@130: S@0 and I@20 are more than 100 ms older
            [1, 0, 0, 0, 1, 1, 1, 1],  # actions: the anchor's window, and each other
            [1, 0, 0, 0, 1, 1, 1, 1],
        ]
    )
    np.testing.assert_array_equal(got, want)


def test_window_boundary_is_inclusive_and_exact():
    W = 100 * MS
    for dt, seen in ((W, 1), (W + 1, 0), (W - 1, 1)):
        t = TokenTimes(
            np.array([STATE, STATE]),
            np.array([10**18, 10**18 + dt]),
            np.array([0, 1]),
            np.array([-1, -1]),
            np.ones(2, bool),
        )
        assert visibility(t, t, W)[1, 0] == seen


def test_numpy_and_torch_twins_agree():
    rng = np.random.default_rng(0)
    n = 40
    kind = rng.choice([TEXT, IMAGE, STATE, ACTION], n)
    stamp = np.sort(rng.integers(0, 300 * MS, n)) + 1_700_000_000 * 10**9
    order = np.sort(rng.integers(0, 20, n))
    chunk = np.where(kind == ACTION, rng.integers(0, 2, n), -1)
    valid = rng.random(n) > 0.1
    a = visibility(TokenTimes(kind, stamp, order, chunk, valid), TokenTimes(kind, stamp, order, chunk, valid), 50 * MS)
    tt = [torch.from_numpy(x) for x in (kind, stamp, order, chunk, valid)]
    b = visibility(TokenTimes(*tt), TokenTimes(*tt), 50 * MS)
    np.testing.assert_array_equal(a, b.numpy())
    periods = tiny_config().rope_periods_ns
    c_np, s_np = rope_tables_np(stamp, kind, periods)
    c_t, s_t = rope_tables(torch.from_numpy(stamp), torch.from_numpy(kind), periods)
    np.testing.assert_allclose(c_np, c_t.numpy(), atol=1e-7)
    np.testing.assert_allclose(s_np, s_t.numpy(), atol=1e-7)
    assert np.all(c_np[kind == TEXT] == 1) and np.all(s_np[kind == TEXT] == 0)


@pytest.mark.parametrize("shift_ns", [0, 86_400 * 10**9, 1_700_000_000 * 10**9])
def test_rope_scores_depend_on_time_difference_only(shift_ns):
    rng = np.random.default_rng(1)
    periods = (20 * MS, 150 * MS, 1_000 * MS, 10_000 * MS)
    q = torch.from_numpy(rng.standard_normal((1, 1, 1, 8)).astype(np.float32))
    k = torch.from_numpy(rng.standard_normal((1, 1, 1, 8)).astype(np.float32))
    base = np.array([123_456_789, 456_789_012])

    def score(times):
        cos, sin = rope_tables_np(times, np.array([STATE, STATE]), periods)
        cq, sq = torch.from_numpy(cos[None, None, :1]), torch.from_numpy(sin[None, None, :1])
        ck, sk = torch.from_numpy(cos[None, None, 1:]), torch.from_numpy(sin[None, None, 1:])
        return float((rotate(q, cq, sq) * rotate(k, ck, sk)).sum())

    assert abs(score(base + shift_ns) - score(base)) < 1e-5
    assert abs(score(base + np.array([0, 7 * MS])) - score(base)) > 1e-3  # and it does depend on the difference


def _sequence(config, seconds, seed, n_chunks=2, text_len=5, targets=True):
    stream = synthetic_stream(config, seconds, seed=seed, start_ns=1_700_000_000 * 10**9)
    rng = np.random.default_rng(seed)
    states = [o for o in stream if o.kind == STATE]
    anchors = [states[-1 - 3 * i].key for i in range(n_chunks)]
    chunks = [
        ChunkSpec(a, rng.standard_normal((config.chunk_length, 7)).astype(np.float32) if targets else None)
        for a in anchors
    ]
    return build_sequence(config, stream, random_instruction(config, text_len, seed).embeddings, chunks)


def test_masked_weights_are_exactly_zero_and_rows_sum_to_one():
    torch.manual_seed(0)
    config = tiny_config()
    model = VLATransformer(config).eval()
    batch = collate([_sequence(config, 0.3, 0), _sequence(config, 0.2, 1)])
    allowed = model.batch_mask(batch)  # (B, T, T)
    with torch.no_grad():
        explicit = model.full_pass(batch, need_weights=True)
        fused = model.full_pass(batch)
    for w in explicit.weights:  # (B, H, T, T) per layer
        assert torch.all(w.masked_select(~allowed[:, None].expand_as(w)) == 0.0)
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-6, rtol=0)
    valid = batch.valid
    torch.testing.assert_close(fused.hidden[valid], explicit.hidden[valid], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(fused.hidden).all()  # padded rows too: none is fully masked


def test_padding_is_never_attended_and_never_in_the_loss():
    torch.manual_seed(0)
    config = tiny_config()
    model = VLATransformer(config).eval()
    short, long = _sequence(config, 0.15, 2), _sequence(config, 0.35, 3)
    alone = collate([short])
    padded = collate([short, long])
    assert padded.shape[1] > short.num_tokens  # short really is padded
    with torch.no_grad():
        h_alone = model.full_pass(alone).hidden[0]
        h_padded = model.full_pass(padded).hidden[0, : short.num_tokens]
        torch.testing.assert_close(h_padded, h_alone, atol=1e-5, rtol=1e-5)
        loss, info = model(padded)
        garbage = padded.targets.clone()
        garbage[~padded.target_valid] = 1e6  # padding and non-action rows: must not matter
        padded.targets = garbage
        loss2, _ = model(padded)
        loss_short, info_short = model(alone)
        loss_long, info_long = model(collate([long]))
    assert loss2 == loss
    assert info["num_targets"] == info_short["num_targets"] + info_long["num_targets"]
    mean = (loss_short * info_short["num_targets"] + loss_long * info_long["num_targets"]) / info["num_targets"]
    torch.testing.assert_close(loss, mean, atol=1e-5, rtol=1e-5)


def test_nan_targets_are_left_out_of_the_loss():
    torch.manual_seed(0)
    config = tiny_config()
    model = VLATransformer(config).eval()
    seq = _sequence(config, 0.2, 4, n_chunks=1)
    full = collate([seq])
    seq.targets[-2:] = np.nan  # the last two points of the chunk have no target (end of the recording)
    partial = collate([seq])
    assert int(partial.target_valid.sum()) == int(full.target_valid.sum()) - 2
    with torch.no_grad():
        loss, info = model(partial)
    assert torch.isfinite(loss) and info["num_targets"] == config.chunk_length - 2


def test_observations_never_see_action_tokens():
    torch.manual_seed(0)
    config = tiny_config()
    model = VLATransformer(config).eval()
    with_chunks = _sequence(config, 0.2, 5, n_chunks=2, targets=False)
    without = _sequence(config, 0.2, 5, n_chunks=0)
    with torch.no_grad():
        a = model.full_pass(collate([with_chunks])).hidden[0, : without.num_tokens]
        b = model.full_pass(collate([without])).hidden[0]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
