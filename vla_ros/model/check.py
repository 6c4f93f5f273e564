"""Exactness checks shared by the tests, ``vla-ros bench policy`` and the GPU check.

``record_stream`` feeds ticks to a ``StreamingPolicy`` and keeps the last computed hidden state of every
token (keyed by observation key and patch index; replays overwrite) and the chunks decoded after chosen
ticks. ``compare_with_full_pass`` runs one full forward pass over the whole stream (instruction, every
observation, the same chunks anchored on the same observations) and returns the largest difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from vla_ros.model.model import VLATransformer
from vla_ros.model.runtime import PolicyChunk, StreamingPolicy
from vla_ros.model.sequence import ChunkSpec, build_sequence, collate, pinned_frame, state_reference
from vla_ros.tokens.types import Kind, Observation


def record_stream(
    policy: StreamingPolicy,
    tick_list: Sequence[Sequence[Observation]],
    chunk_after: Iterable[int] = (),
    hidden: dict | None = None,
    chunks: list | None = None,
) -> tuple[dict, list[tuple[tuple, PolicyChunk]]]:
    """Observe each tick; decode a chunk after the ticks whose index is in chunk_after."""
    hidden = {} if hidden is None else hidden
    chunks = [] if chunks is None else chunks
    after = set(chunk_after)
    for i, tick in enumerate(tick_list):
        report = policy.observe(tick, return_hidden=True)
        for h, key, patch in zip(report.hidden, report.token_keys, report.token_patch):
            hidden[(key, int(patch))] = h
        if i in after:
            chunks.append((policy.newest_key, policy.predict_action_chunk(return_hidden=True)))
    return hidden, chunks


def full_pass_outputs(
    model: VLATransformer, observations: Sequence[Observation], text: np.ndarray | None, anchors: Sequence[tuple] = ()
) -> tuple[dict, list[tuple[np.ndarray, np.ndarray]]]:
    """Reference outputs of one full pass: {(key, patch): hidden} and per chunk (positions, hidden)."""
    config = model.config
    pinned = pinned_frame(observations) if config.pin_first_frame else None  # as the runtime pins after its reset
    seq = build_sequence(config, observations, text, [ChunkSpec(a) for a in anchors], pinned=pinned)
    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model.full_pass(collate([seq]).to(device))
    H = out.hidden[0].float().cpu().numpy()
    A = out.actions[0].float().cpu().numpy()
    P, Hc = config.num_visual_tokens, config.chunk_length
    hidden = {}
    for t in range(seq.num_tokens):
        if seq.kind[t] in (int(Kind.IMAGE), int(Kind.STATE)) and seq.token_obs[t] >= 0:  # not the pinned copy
            patch = int(seq.src_index[t] % P) if seq.kind[t] == int(Kind.IMAGE) else 0
            hidden[(observations[seq.token_obs[t]].key, patch)] = H[t]
    first = seq.num_tokens - Hc * len(anchors)
    chunks = [
        (A[first + c * Hc : first + (c + 1) * Hc], H[first + c * Hc : first + (c + 1) * Hc])
        for c in range(len(anchors))
    ]
    if config.relative_actions:  # the runtime adds the newest joint state back: so does the reference
        ordered = sorted(observations, key=lambda o: o.key)
        chunks = [
            (positions + state_reference(ordered, anchor, len(config.joint_names)), h)
            for (positions, h), anchor in zip(chunks, anchors)
        ]
    return hidden, chunks


def compare_with_full_pass(
    model: VLATransformer,
    observations: Sequence[Observation],
    text: np.ndarray | None,
    hidden: dict,
    chunks: list[tuple[tuple, PolicyChunk]],
) -> float:
    """Max |streamed - full pass| over every streamed token's hidden state and every chunk (positions and
    hidden states). Every observation in ``observations`` must have been streamed."""
    ref_hidden, ref_chunks = full_pass_outputs(model, observations, text, [key for key, _ in chunks])
    missing = set(ref_hidden) - set(hidden)
    if missing:
        raise AssertionError(f"{len(missing)} tokens were never streamed, e.g. {sorted(missing)[:3]}")
    diff = max(float(np.abs(hidden[k] - ref_hidden[k]).max()) for k in ref_hidden)
    for (_, chunk), (positions, h) in zip(chunks, ref_chunks):
        diff = max(diff, float(np.abs(chunk.positions - positions).max()), float(np.abs(chunk.hidden - h).max()))
    return diff


def max_stream_diff(a: tuple[dict, list], b: tuple[dict, list]) -> float:
    """Max difference between two ``record_stream`` results of the same stream (hidden states and chunks)."""
    (ha, ca), (hb, cb) = a, b
    if set(ha) != set(hb) or len(ca) != len(cb):
        raise AssertionError("the two recordings cover different tokens or chunks")
    diff = max(float(np.abs(ha[k] - hb[k]).max()) for k in ha) if ha else 0.0
    for (_, x), (_, y) in zip(ca, cb):
        diff = max(diff, float(np.abs(x.positions - y.positions).max()))
    return diff
