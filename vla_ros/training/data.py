"""Training sequences from replayed episodes, built with the exact streaming mask.

An example is a stretch of one episode: every observation in ``[t_end - span - context, t_end]`` in key
order, plus action chunks anchored at up to ``chunks_per_sequence`` observations of the last ``span``
seconds, each with the commanded positions at its future times as targets. One forward pass trains all
those chunks at once, each seeing exactly what the streaming runtime would have in its window (the
model's per-token time-window mask). The ``context`` before the first anchor gives the window's oldest
tokens their own history, so deeper layers see what they would online (episodes also start from empty,
exactly as the node does after a reset).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import numpy as np

from vla_ros.data.dataset import Episode, episode_paths, make_stream, replay
from vla_ros.tokens import Kind, StreamConfig, TokenizerConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EpisodeData:
    name: str
    observations: list  # Observation, key order
    t_s: np.ndarray  # (N,) observation times
    text: np.ndarray  # (L, 384)
    instruction: str
    command_t_s: np.ndarray
    command_positions: np.ndarray


def load_episodes(data_dir: str | Path, tokenizer: TokenizerConfig, max_lateness_s: float, progress: bool = True) -> tuple[list[EpisodeData], dict]:
    """Replay every bag under ``data_dir`` through the token stream; skip failed or target-less episodes."""
    from tqdm import tqdm

    paths = episode_paths(data_dir)
    episodes, skipped = [], {}
    digest = hashlib.sha256()
    for path in tqdm(paths, desc="replaying episodes", unit="ep", disable=not progress):
        digest.update(path.name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
        stream = make_stream(tokenizer, StreamConfig(window_s=1e6, lateness_s=max_lateness_s, clock_jump_s=max(1.0, 2 * max_lateness_s)))
        ep: Episode = replay(path, stream, keep_windows=False)
        reason = None
        if ep.success is False:
            reason = "not_successful"
        elif ep.instruction is None:
            reason = "no_instruction"
        elif len(ep.command_t_s) < 2:
            reason = "no_commands"
        elif not any(o.kind == Kind.IMAGE for o in ep.observations):
            reason = "no_frames"
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        episodes.append(EpisodeData(
            name=path.name, observations=ep.observations, t_s=np.array([o.t_s for o in ep.observations]),
            text=ep.instruction.embeddings, instruction=ep.instruction.text,
            command_t_s=ep.command_t_s, command_positions=ep.command_positions,
        ))
    if not episodes:
        raise ValueError(f"no usable episodes under {data_dir} (skipped: {skipped})")
    summary = {
        "files": len(paths), "episodes": len(episodes), "skipped": skipped, "sha256": digest.hexdigest(),
        "observations": int(sum(len(e.observations) for e in episodes)),
        "seconds": round(float(sum(e.t_s[-1] - e.t_s[0] for e in episodes)), 1),
        "instructions": sorted({e.instruction for e in episodes}),
    }
    return episodes, summary


def normalisation_stats(episodes: list[EpisodeData]) -> dict[str, list[float]]:
    """Per-dimension mean/std of states and commanded positions (std floored so constant joints stay finite)."""
    states = np.concatenate([np.stack([o.data for o in e.observations if o.kind == Kind.STATE]) for e in episodes])
    actions = np.concatenate([e.command_positions for e in episodes])
    floor = 1e-2
    return {
        "state_mean": states.mean(0).astype(float).tolist(), "state_std": np.maximum(states.std(0), floor).astype(float).tolist(),
        "action_mean": actions.mean(0).astype(float).tolist(), "action_std": np.maximum(actions.std(0), floor).astype(float).tolist(),
    }


def chunk_targets(ep: EpisodeData, anchor_t_s: float, offsets_s: np.ndarray) -> np.ndarray:
    """(H, J) commanded positions at the chunk's times; NaN past the end of the recording (no loss)."""
    t = anchor_t_s + offsets_s
    out = np.stack([np.interp(t, ep.command_t_s, ep.command_positions[:, j]) for j in range(ep.command_positions.shape[1])], axis=1)
    out[(t > ep.command_t_s[-1]) | (t < ep.command_t_s[0])] = np.nan
    return out.astype(np.float32)


def make_sequence(config, ep: EpisodeData, t_end_s: float, span_s: float, context_s: float, chunks: int, rng: np.random.Generator,
                  state_noise: tuple[float, float] = (0.0, 0.0)):
    """One training sequence of ``ep`` ending at ``t_end_s`` (see the module docstring).

    ``state_noise`` = (position std, velocity std) added to the joint-state inputs (not the targets): the
    policy cannot copy the measured state forward and must look at the image (the "copycat" shortcut of
    behaviour cloning with proprioception), and it sees states a little off the demonstrations.
    """
    import dataclasses as dc

    from vla_ros.model.sequence import ChunkSpec, build_sequence

    lo = np.searchsorted(ep.t_s, t_end_s - span_s - context_s, side="left")
    hi = np.searchsorted(ep.t_s, t_end_s, side="right")
    observations = ep.observations[lo:hi]
    if state_noise[0] > 0 or state_noise[1] > 0:
        n = len(config.joint_names)
        noisy = []
        for o in observations:
            if o.kind == Kind.STATE:
                d = o.data.copy()
                d[:n] += rng.normal(0.0, state_noise[0], n).astype(np.float32)
                d[n:] += rng.normal(0.0, state_noise[1], d.size - n).astype(np.float32)
                o = dc.replace(o, data=d)
            noisy.append(o)
        observations = noisy
    first_anchor = np.searchsorted(ep.t_s[lo:hi], t_end_s - span_s, side="left")
    candidates = np.arange(first_anchor, len(observations))
    if len(candidates) == 0:
        return None
    picks = np.sort(rng.choice(candidates, size=min(chunks, len(candidates)), replace=False))
    offsets_s = np.asarray(config.chunk_offsets_ns, np.float64) / 1e9
    specs = []
    for i in picks:
        anchor = observations[i]
        targets = chunk_targets(ep, anchor.t_s, offsets_s)
        if np.isnan(targets).all():
            continue
        specs.append(ChunkSpec(anchor=anchor.key, targets=targets))
    if not specs:
        return None
    return build_sequence(config, observations, text=ep.text, chunks=specs, validate=False)


def sample_sequence(config, episodes: list[EpisodeData], span_s: float, context_s: float, chunks: int, rng: np.random.Generator,
                    state_noise: tuple[float, float] = (0.0, 0.0)):
    """A random sequence: a random episode, a random end time (never before its first frame)."""
    while True:
        ep = episodes[int(rng.integers(len(episodes)))]
        t_end = float(rng.uniform(ep.t_s[0] + 0.05, ep.t_s[-1]))
        seq = make_sequence(config, ep, t_end, span_s, context_s, chunks, rng, state_noise)
        if seq is not None:
            return seq
