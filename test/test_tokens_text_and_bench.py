"""The real MiniLM instruction encoder, and the token benchmark's figures (direction, not timing)."""

import json

import numpy as np
import pytest

from vla_ros.bench import tokens_bench
from vla_ros.tokens import StreamConfig, TokenStream
from vla_ros.tokens.text import shared_encoder


@pytest.fixture(scope="module")
def encoder():
    return shared_encoder(32)


def test_instruction_becomes_word_piece_embeddings(encoder):
    red = encoder("pick up the red cup")
    assert red.tokens == ("[CLS]", "pick", "up", "the", "red", "cup", "[SEP]")
    assert red.embeddings.shape == (7, 384) and red.embeddings.dtype == np.float32
    assert np.all(np.isfinite(red.embeddings))
    blue = encoder("pick up the blue cup")
    i = red.tokens.index("red")
    # the colour word differs most; embeddings are contextual, so "cup" differs a little too
    diff = np.linalg.norm(red.embeddings - blue.embeddings, axis=1)
    assert diff[i] == diff.max() and diff[i] > 1.0
    assert np.array_equal(encoder("pick up the red cup").embeddings, red.embeddings)  # deterministic


def test_long_instructions_are_cut_to_the_token_budget(encoder):
    from vla_ros.tokens.text import TextEncoder

    short = TextEncoder(max_tokens=6)("please pick up the red cup on the left of the table")
    assert len(short.tokens) == 6 and short.tokens[-1] == "[SEP]"


def test_stream_pins_the_instruction_and_bumps_its_generation_only_on_change(encoder):
    stream = TokenStream(stream=StreamConfig(), encode_text=encoder)
    first = stream.set_instruction("pick up the red cup", 5)
    assert first is not None and stream.instruction_generation == 1 and first.stamp_ns == 5
    assert stream.set_instruction("  pick up   the red cup ", 6) is first  # same words, same tokens
    assert stream.instruction_generation == 1
    stream.set_instruction("pick up the green cup", 7)
    assert stream.instruction_generation == 2 and "green" in stream.instruction.tokens


def test_token_bench_reports_the_comparison(capsys):
    assert tokens_bench.main(["--seconds", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["joint_msgs_used_pct_tokens"] == 100.0
    assert 25.0 <= result["joint_msgs_used_pct_nearest"] <= 35.0  # one joint message per frame: 30 of 100
    assert result["staleness_ms_p50_tokens"] < result["staleness_ms_p50_nearest"]
    assert result["tokens_rejected"] == 0 and result["frames"] == 120
    for key in ("tokenize_us_per_msg_p50_image", "tokenize_us_per_msg_p50_joints"):
        assert result[key] > 0


def test_nearest_pairing_uses_one_joint_message_per_frame_within_the_slop():
    pairing = tokens_bench.NearestPairing(slop_ns=10)
    assert pairing.add("joints", 100, "j100") is None
    assert pairing.add("joints", 108, "j108") is None
    assert pairing.add("image", 105, "f105") == ("f105", "j108")  # closest within slop
    assert pairing.add("image", 140, "f140") is None  # nothing within 10 ns
    assert pairing.add("joints", 145, "j145") == ("f140", "j145")
    assert pairing.queues["joints"] == {100: "j100"}
