"""Synthetic observation streams (random frames and joint states at fixed rates) for tests and benchmarks.

Stamps are integer nanoseconds from ``start_ns``, like the token pipeline's: frames at
round(k * 1e9 / camera_hz), joint states at round(k * 1e9 / state_hz). ``ticks`` groups a stream the way
a node running the policy once per camera frame sees it: each tick ends with a frame.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vla_ros.cameras import image_topic
from vla_ros.model.config import ModelConfig
from vla_ros.tokens.types import Instruction, Kind, Observation


def synthetic_stream(
    config: ModelConfig,
    seconds: float,
    seed: int = 0,
    start_ns: int = 0,
    camera_hz: float = 30.0,
    state_hz: float = 100.0,
) -> list[Observation]:
    """Frames (one per camera of the config) and states over ``seconds``, sorted by key; images ~N(0, 1),
    states ~N(0, 0.5)."""
    rng = np.random.default_rng(seed)
    span_ns = int(round(seconds * 1e9))
    events = []
    streams = [(camera_hz, Kind.IMAGE, c) for c in range(len(config.cameras))] + [(state_hz, Kind.STATE, 0)]
    for rate, kind, camera in streams:
        k = 0
        while (offset := int(round(k * 1e9 / rate))) < span_ns:
            events.append((offset, kind, camera))
            k += 1
    events.sort(key=lambda e: (e[0], int(e[1]), e[2]))
    out = []
    for seq, (offset, kind, camera) in enumerate(events):
        if kind == Kind.IMAGE:
            data = rng.standard_normal((3, config.image_height, config.image_width)).astype(np.float32)
            source = image_topic(config.cameras[camera])
        else:
            data = (0.5 * rng.standard_normal(config.state_dim)).astype(np.float32)
            source = "/joint_states"
        out.append(Observation(kind, start_ns + offset, offset / 1e9, seq, data, source, camera))
    return sorted(out, key=lambda o: o.key)


def shifted(observations: list[Observation], shift_ns: int) -> list[Observation]:
    """The same stream with every stamp moved by shift_ns (t_s moves too)."""
    return [dataclasses.replace(o, stamp_ns=o.stamp_ns + shift_ns, t_s=o.t_s + shift_ns / 1e9) for o in observations]


def ticks(observations: list[Observation]) -> list[list[Observation]]:
    """Group a key-sorted stream into ticks that each end with a frame (the last tick may not)."""
    out, current = [], []
    for obs in observations:
        current.append(obs)
        if obs.kind == Kind.IMAGE:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def random_instruction(
    config: ModelConfig, length: int = 8, seed: int = 0, text: str = "pick up the red cup"
) -> Instruction:
    """An instruction with random (L, 384) embeddings standing in for MiniLM's."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((length, config.text_embedding_dim)).astype(np.float32)
    return Instruction(text=text, tokens=tuple(f"tok{i}" for i in range(length)), embeddings=emb)
