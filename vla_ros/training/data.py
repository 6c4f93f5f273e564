"""Training sequences from replayed episodes, built with the exact streaming mask.

An example is a stretch of one episode: every observation in ``[t_end - span - context, t_end]`` in key
order, plus action chunks anchored at up to ``chunks_per_sequence`` observations of the last ``span``
seconds, each with its chunk targets (``data.targets``: the commanded positions at its future times, or
the measured ones in a bag without commands). One forward pass trains all
those chunks at once, each seeing exactly what the streaming runtime would have in its window (the
model's per-token time-window mask). The ``context`` before the first anchor gives the window's oldest
tokens their own history, so deeper layers see what they would online (episodes also start from empty,
exactly as the node does after a reset).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from pathlib import Path

import numpy as np

from vla_ros.data.bag import bag_files
from vla_ros.data.dataset import Episode, episode_paths, make_stream, replay
from vla_ros.data.selection import BagSelection, Diagnosis, unusable_reason
from vla_ros.data.targets import MAX_TARGET_GAP_S, chunk_targets, chunk_usable, target_track
from vla_ros.tasks import task_of
from vla_ros.tokens import Kind, StreamConfig, TokenizerConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EpisodeData:
    name: str
    observations: list  # Observation, key order
    t_s: np.ndarray  # (N,) observation times
    text: np.ndarray  # (L, 384)
    instruction: str
    target_t_s: np.ndarray  # (M,) times of the recorded trajectory chunk targets come from (data.targets)
    target_positions: np.ndarray  # (M, J)
    target_source: str = "commands"  # or "joint_states" (a bag without commands)
    # the task's track (``tasks.Task.episode_track``, e.g. the named cup's position from /vla/episode_status)
    track_t_s: np.ndarray | None = None  # (M,) times
    track: np.ndarray | None = None  # (M, K) values

    @functools.cached_property
    def pinned(self):
        """The frame a model with ``pin_first_frame`` pins in every sequence of this episode (its first
        main-camera frame, ``sequence.pinned_frame``), or None."""
        from vla_ros.model.sequence import pinned_frame

        return pinned_frame(self.observations)


def load_episodes(
    data_dir: str | Path | list,
    tokenizer: TokenizerConfig,
    max_lateness_s: float,
    progress: bool = True,
    selection: BagSelection = BagSelection(),  # noqa: B008 (frozen: one shared default is safe)
    task=None,
    min_frame_interval_s: float = 0.0,
) -> tuple[list[EpisodeData], dict]:
    """Replay every bag under ``data_dir`` through the token stream; skip failed or target-less episodes.

    ``selection``: the bags' topic names, the commands' joint order and an instruction for the whole bag.
    Chunk targets come from the bag's commands, else its joint states (``data.targets.target_track``).
    ``task``: a ``vla_ros.tasks.Task`` whose track (``episode_track``) each episode also carries, or None.
    ``min_frame_interval_s``: the model's frame thinning (``ModelConfig.min_frame_interval_s``), applied by
    the same stream rule as online.
    Raises NoUsableEpisodes (what each skipped bag had) when none is usable, BagError for a bad path.
    """
    from tqdm import tqdm

    dirs = [data_dir] if isinstance(data_dir, (str, Path)) else list(data_dir)
    paths = [p for d in dirs for p in episode_paths(d)]
    episodes, diagnosis = [], Diagnosis(selection, tokenizer.joint_names)
    digest = hashlib.sha256()
    for path in tqdm(paths, desc="replaying episodes", unit="ep", disable=not progress):
        digest.update(path.name.encode())
        for file in bag_files(path):
            digest.update(hashlib.sha256(file.read_bytes()).digest())
        stream = make_stream(
            tokenizer,
            StreamConfig(
                window_s=1e6,
                lateness_s=max_lateness_s,
                clock_jump_s=max(1.0, 2 * max_lateness_s),
                min_frame_interval_s=min_frame_interval_s,
            ),
        )
        ep: Episode = replay(
            path,
            stream,
            selection.topics,
            selection.command_joint_names,
            keep_windows=False,
            instruction=selection.instruction,
        )
        reason = unusable_reason(ep)
        diagnosis.add(ep, reason)
        if reason:
            continue
        track_t, track = task.episode_track(ep) if task is not None else (None, None)
        target_t, target_q, source = target_track(
            ep.command_t_s, ep.command_positions, ep.joint_t_s, ep.joint_positions
        )
        episodes.append(
            EpisodeData(
                name=path.name,
                observations=ep.observations,
                t_s=np.array([o.t_s for o in ep.observations]),
                text=ep.instruction.embeddings,
                instruction=ep.instruction.text,
                target_t_s=target_t,
                target_positions=target_q,
                target_source=source,
                track_t_s=track_t,
                track=track,
            )
        )
    if not episodes:
        raise diagnosis.error(", ".join(str(d) for d in dirs))
    skipped = dict(diagnosis.skipped)
    summary = {
        "files": len(paths),
        "episodes": len(episodes),
        "skipped": skipped,
        "sha256": digest.hexdigest(),
        "skipped_topics": dict(diagnosis.skipped_topics),
        "observations": int(sum(len(e.observations) for e in episodes)),
        "seconds": round(float(sum(e.t_s[-1] - e.t_s[0] for e in episodes)), 1),
        "instructions": sorted({e.instruction for e in episodes}),
        "target_sources": {
            s: sum(e.target_source == s for e in episodes) for s in sorted({e.target_source for e in episodes})
        },
    }
    return episodes, summary


def floored_std(values: np.ndarray, floor: float = 1e-2, cap: float = 0.1) -> np.ndarray:
    """Per-column std, floored at min(cap, range / 4) (and at ``floor``).

    The std is the loss weight of a joint (errors are measured in stds): a joint that barely moves in the
    data (a wrist roll settling from a perturbed start) would otherwise weigh a hundred times more than
    the shoulder that carries the task. A joint whose whole range is small (a 4 cm gripper) keeps its own
    scale.
    """
    span = values.max(0) - values.min(0)
    return np.maximum(values.std(0), np.maximum(np.minimum(cap, span / 4.0), floor))


def learned_targets(config, ep: EpisodeData, anchor, end_hold_s: float = 0.0) -> np.ndarray | None:
    """(H, J) targets of the chunk anchored at observation ``anchor`` as the model learns them: the recorded
    trajectory at the chunk's instants (``chunk_targets``, NaN where there is none), as offsets from the
    measured joint positions at the anchor when the model's chunks are state-relative (``state_reference``
    over the episode's true states, also where the inputs leave them out). None: not trained on (no target
    at the first point, or no joint state yet for a state-relative chunk). ``end_hold_s``: the last command
    holds this long past the end of the target track (``chunk_targets``' hold_s), where that track runs to
    the episode's end; a track that stops earlier (a policy-driven end of a rollout) gets none."""
    from vla_ros.model.sequence import state_reference  # torch: imported where a model is trained

    offsets_s = np.asarray(config.chunk_offsets_ns, np.float64) / 1e9
    runs_to_end = len(ep.target_t_s) and ep.target_t_s[-1] >= ep.t_s[-1] - MAX_TARGET_GAP_S
    targets = chunk_targets(
        ep.target_t_s, ep.target_positions, anchor.t_s, offsets_s, hold_s=end_hold_s if runs_to_end else 0.0
    )
    if not chunk_usable(targets):  # the chunk must start where someone is commanding (the expert)
        return None
    if config.relative_actions:
        reference = state_reference(ep.observations, anchor.key, len(config.joint_names))
        if reference is None:
            return None
        targets = targets - reference
    return targets


def normalisation_stats(episodes: list[EpisodeData], config=None, end_hold_s: float = 0.0) -> dict[str, list[float]]:
    """Per-dimension mean/std of states and of what the actions learn (see ``floored_std``): the target
    positions, or with a state-relative ``config`` the targets of chunks anchored at every tenth joint state
    (``learned_targets`` with ``end_hold_s``)."""
    states = np.concatenate([np.stack([o.data for o in e.observations if o.kind == Kind.STATE]) for e in episodes])
    if config is not None and config.relative_actions:
        chunks = [
            learned_targets(config, e, o, end_hold_s)
            for e in episodes
            for o in [o for o in e.observations if o.kind == Kind.STATE][::10]
        ]
        actions = np.concatenate([c[np.isfinite(c).all(1)] for c in chunks if c is not None])
    else:
        actions = np.concatenate([e.target_positions for e in episodes])
    return {
        "state_mean": states.mean(0).astype(float).tolist(),
        "state_std": floored_std(states).astype(float).tolist(),
        "action_mean": actions.mean(0).astype(float).tolist(),
        "action_std": floored_std(actions).astype(float).tolist(),
    }


def mean_image(episodes: list[EpisodeData]) -> np.ndarray:
    """(3, H, W) mean of the main camera's training frames as the tokenizer made them (see
    PatchEncoder.mean_image): what stands still in that view. A wrist camera's view has no still background."""
    total, count = None, 0
    for e in episodes:
        for o in e.observations:
            if o.kind == Kind.IMAGE and o.camera == 0:
                total = o.data.astype(np.float64) if total is None else total + o.data
                count += 1
    return (total / max(count, 1)).astype(np.float32)


def make_sequence(
    config,
    ep: EpisodeData,
    t_end_s: float,
    span_s: float,
    context_s: float,
    chunks: int,
    rng: np.random.Generator,
    state_noise: tuple[float, float] = (0.0, 0.0),
    drop_states: bool = False,
    text: np.ndarray | None = None,
    end_hold_s: float = 0.0,
):
    """One training sequence of ``ep`` ending at ``t_end_s`` (see the module docstring).

    ``state_noise`` = (position std, velocity std) added to the joint-state inputs (not the targets): the
    policy cannot copy the measured state forward and must look at the image (the "copycat" shortcut of
    behaviour cloning with proprioception), and it sees states a little off the demonstrations.
    ``drop_states``: leave the joint states out altogether (proprioception dropout). Half a second of
    joint states tells where the arm is heading, hence where the cup is, everywhere but at the start; a
    policy trained only with them learns to read the target off its own motion and, at rest, goes to the
    average cup. Without them the camera is the only way to the cup and to the arm.
    ``text``: the instruction's token embeddings to use instead of the episode's own (another phrasing).
    ``end_hold_s``: chunk targets past the end of the episode's commands (``learned_targets``).
    """
    import dataclasses as dc

    from vla_ros.model.sequence import ChunkSpec, build_sequence

    lo = np.searchsorted(ep.t_s, t_end_s - span_s - context_s, side="left")
    hi = np.searchsorted(ep.t_s, t_end_s, side="right")
    observations = ep.observations[lo:hi]
    if drop_states:
        observations = [o for o in observations if o.kind != Kind.STATE]
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
    times = np.array([o.t_s for o in observations])
    first_anchor = np.searchsorted(times, t_end_s - span_s, side="left")
    candidates = np.arange(first_anchor, len(observations))
    if len(candidates) == 0:
        return None
    picks = np.sort(rng.choice(candidates, size=min(chunks, len(candidates)), replace=False))
    task = task_of(config)  # the task whose heads the model carries gives their targets
    specs = []
    for i in picks:
        anchor = observations[i]
        targets = learned_targets(config, ep, anchor, end_hold_s)
        if targets is None:
            continue
        specs.append(ChunkSpec(anchor=anchor.key, targets=targets, aux=task.chunk_target(config, ep, anchor.t_s)))
    if not specs:
        return None
    frame_aux = task.frame_targets(config, ep, observations)
    # The pinned frame once it exists, as online: a sequence that ends before the episode's first frame has none.
    pinned = ep.pinned if config.pin_first_frame and ep.pinned is not None and ep.pinned.t_s <= t_end_s else None
    return build_sequence(
        config,
        observations,
        text=ep.text if text is None else text,
        chunks=specs,
        validate=False,
        frame_aux=frame_aux,
        pinned=pinned,
    )


def gripper_events(ep: EpisodeData, joint: int = -1) -> np.ndarray:
    """Times (s) at which the target track of ``joint`` (the gripper, last in the simulated arm's order)
    crosses the middle of its range in the episode: where it is commanded shut or open. Empty when the
    joint's targets move less than a millimetre (or a milliradian) in the episode."""
    q = np.asarray(ep.target_positions, np.float64)[:, joint]
    finite = np.isfinite(q)
    t, q = np.asarray(ep.target_t_s, np.float64)[finite], q[finite]
    if q.size < 2 or q.max() - q.min() < 1e-3:
        return np.zeros(0)
    above = q > 0.5 * (q.max() + q.min())
    return t[1:][above[1:] != above[:-1]]


def sample_sequence(
    config,
    episodes: list[EpisodeData],
    span_s: float,
    context_s: float,
    chunks: int,
    rng: np.random.Generator,
    state_noise: tuple[float, float] = (0.0, 0.0),
    drop_states_p: float = 0.0,
    phrasings=None,
    swap_p: float = 0.0,
    events: list[np.ndarray] | None = None,
    focus_p: float = 0.0,
    focus_s: float = 0.5,
    shift_px: int = 0,
    end_hold_s: float = 0.0,
):
    """A random sequence: a random episode, a random end time (never before its first frame); its joint
    states are dropped with probability ``drop_states_p`` (see make_sequence). With ``phrasings`` (instruction
    text -> token embeddings of other phrasings of the same request, ``tasks.TaskTraining.phrasings``), the
    instruction is, with probability ``swap_p``, a random one of them. With ``events`` (per episode,
    e.g. ``gripper_events``), the end time is, with probability ``focus_p``, within ``focus_s`` of one of the
    episode's events, so its chunks cover the moments before and after (the grasp). With ``shift_px``, every
    frame of the sequence is moved by one random whole-pixel offset of up to that many pixels each way
    (``shift_images``). ``end_hold_s``: as in make_sequence."""
    while True:
        i = int(rng.integers(len(episodes)))
        ep = episodes[i]
        t_end = float(rng.uniform(ep.t_s[0] + 0.05, ep.t_s[-1]))
        if focus_p > 0 and events is not None and len(events[i]) and rng.random() < focus_p:
            event = float(events[i][int(rng.integers(len(events[i])))])
            t_end = float(np.clip(event + rng.uniform(-focus_s, focus_s), ep.t_s[0] + 0.05, ep.t_s[-1]))
        drop = bool(rng.random() < drop_states_p)
        text = None
        if phrasings and rng.random() < swap_p:
            pool = phrasings(ep.instruction)
            text = pool[int(rng.integers(len(pool)))] if pool else None
        seq = make_sequence(config, ep, t_end, span_s, context_s, chunks, rng, state_noise, drop, text, end_hold_s)
        if seq is not None and shift_px > 0:
            dy, dx = (int(d) for d in rng.integers(-shift_px, shift_px + 1, size=2))
            seq = dataclasses.replace(seq, images=shift_images(seq.images, dy, dx))
        if seq is not None:
            return seq


def shift_images(images: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """(F, C, H, W) frames moved ``dy`` rows down and ``dx`` columns right, the uncovered border filled with
    the nearest edge pixel (random-shift augmentation, as in DrQ and robomimic). One offset for a whole
    sequence is a camera a little off its calibration: where the cup lies relative to the gripper in the
    picture stays true, its absolute pixel position does not."""
    if dy == 0 and dx == 0:
        return images
    _, _, h, w = images.shape
    padded = np.pad(images, ((0, 0), (0, 0), (abs(dy),) * 2, (abs(dx),) * 2), mode="edge")
    top, left = abs(dy) - dy, abs(dx) - dx
    return np.ascontiguousarray(padded[:, :, top : top + h, left : left + w])
