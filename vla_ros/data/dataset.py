"""MCAP episodes -> training samples, through the same token stream the policy node runs online.

Replaying an episode feeds every recorded message, in log-time order and with its log time as the
receive time, to ``TokenStream.add_message`` -- exactly what the node does with live messages -- so the
observations a sample holds are the ones the node would have had at that instant. A sample is taken at
every accepted camera frame: the window at that moment, the pinned instruction, and the targets: the
joint positions the chunk should reach at ``t + (k+1)/chunk_rate_hz`` for k < H, where t is the newest
observation's time (often a joint state that arrived before the frame), exactly as the node stamps chunks.

Targets come from the commands the robot was given when the bag has them, else from the measured joint
states; ``data.targets`` holds the rules (the same for training). Commands are better where they differ: a
closed gripper squeezing a cup measures the cup's width but was commanded shut.

A bag is a rosbag2 bag folder or one MCAP file (:mod:`vla_ros.data.bag`); :class:`Topics` says which of
its topics are the camera, joint states, commands and instruction (another robot's names, not only the
sim's), and an instruction can be given for bags that carry none.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vla_ros.data.bag import find_bags
from vla_ros.data.mcap_io import read_messages, read_metadata
from vla_ros.data.targets import chunk_offsets_s, chunk_targets, chunk_usable, target_track
from vla_ros.tokens import Instruction, Kind, Observation, StreamConfig, TokenizerConfig, TokenStream

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Topics:
    """Topic names in the bags (the defaults are what the sim and the nodes publish)."""

    image: str = "/camera/image_raw"
    compressed_image: str = "/camera/image_raw/compressed"
    joint_states: str = "/joint_states"
    instruction: str = "/vla/instruction"
    commands: str = "/forward_position_controller/commands"
    episode_status: str = "/vla/episode_status"
    extra_images: tuple[str, ...] = ()  # image topics of the model's further cameras (camera 1, 2, ...), e.g. the wrist

    @classmethod
    def for_robot(
        cls,
        camera: str | None = None,
        joint_states: str | None = None,
        commands: str | None = None,
        instruction: str | None = None,
    ) -> Topics:
        """The defaults with a user's topic names; ``camera`` may carry Image or CompressedImage."""
        d = cls()
        return cls(
            image=camera or d.image,
            compressed_image=camera or d.compressed_image,
            joint_states=joint_states or d.joint_states,
            commands=commands or d.commands,
            instruction=instruction or d.instruction,
        )

    def observation_topics(self) -> list[str]:
        return list(
            dict.fromkeys([self.image, self.compressed_image, *self.extra_images, self.joint_states, self.instruction])
        )

    def camera_sources(self) -> dict[str, int]:
        """Image topic -> the model's camera index (``Observation.camera``)."""
        return {self.image: 0, self.compressed_image: 0, **{t: i + 1 for i, t in enumerate(self.extra_images)}}

    def with_cameras(self, cameras: tuple[str, ...]) -> Topics:
        """These topics for a model reading ``cameras`` (``ModelConfig.cameras``): the first is this camera
        topic, the others ``/<name>/image_raw`` (``vla_ros.cameras``)."""
        from vla_ros.cameras import image_topic

        return dataclasses.replace(self, extra_images=tuple(image_topic(c) for c in cameras[1:]))


@dataclasses.dataclass(frozen=True)
class Sample:
    """One training example.

    Args:
        observations: the window when the frame arrived, oldest first; t_s relative to the episode epoch.
        instruction: the pinned instruction.
        t_s: time of the newest observation in the window (the chunk's stamp).
        target_t_s: (H,) times of the chunk points.
        target_positions: (H, J) joint positions to reach at those times, J in the tokenizer's joint order;
            NaN where the recording has no target (``data.targets``).
    """

    episode: str
    observations: list[Observation]
    instruction: Instruction
    t_s: float
    target_t_s: np.ndarray
    target_positions: np.ndarray


@dataclasses.dataclass
class Episode:
    """Everything replayed from one bag: the per-frame windows and the joint trajectories for targets."""

    path: Path
    windows: list[tuple[float, list[Observation]]]  # (frame t_s, window) at each accepted frame
    observations: list[Observation]  # the stream's window at the end (everything, with a long window_s)
    instruction: Instruction | None
    joint_t_s: np.ndarray  # (N,) measured joint-state times
    joint_positions: np.ndarray  # (N, J)
    command_t_s: np.ndarray  # (M,) command receive times (Float64MultiArray has no stamp)
    command_positions: np.ndarray  # (M, J)
    stats: dict[str, int]
    metadata: dict[str, dict[str, str]]
    status: dict | None  # the last episode status (JSON) in the bag, if any
    lifted: str | None = None  # the cup a status reported lifted at any time in the bag
    statuses: list = dataclasses.field(default_factory=list)  # (t_s, status dict), after the first observation
    joint_names_seen: Counter = dataclasses.field(default_factory=Counter)  # name lists of the joint states
    skipped_topics: Counter = dataclasses.field(default_factory=Counter)  # "<topic>: <reason>" -> messages
    topic_counts: Counter = dataclasses.field(default_factory=Counter)  # messages read per selected topic

    @property
    def success(self) -> bool | None:
        """A cup was lifted at some point (as collect counts it); None when the bag has no status."""
        if self.status is None:
            return None
        return bool(self.lifted)


def replay(
    path: str | Path,
    stream: TokenStream,
    topics: Topics = Topics(),
    command_joint_names: tuple[str, ...] | None = None,
    keep_windows: bool = True,
    instruction: str | None = None,
) -> Episode:
    """Feed one bag (folder or MCAP file) through ``stream``; keeps the window at every accepted frame.

    ``command_joint_names``: the joint order of the Float64MultiArray commands (the sim's canonical order,
    which is the tokenizer's default order); commands are reordered to the tokenizer's joint order.
    ``keep_windows``: False skips the per-frame windows (training uses ``observations`` instead).
    ``instruction``: the task of the whole bag; the bag's instruction topic is then not read.
    Frames of ``topics.extra_images`` are further cameras (``Observation.camera`` 1, 2, ...); windows are
    kept at the main camera's frames.
    """
    path = Path(path)
    joint_names = stream.tokenizer.joint_names
    cmd_names = tuple(command_joint_names or joint_names)
    missing = [n for n in joint_names if n not in cmd_names]
    cmd_index = None if missing else np.array([cmd_names.index(n) for n in joint_names])
    windows: list[tuple[float, list[Observation]]] = []
    joint_t, joint_q, cmd_t, cmd_q = [], [], [], []
    status = None
    lifted = None  # the first cup any status reported lifted (it may slip later in the recording)
    statuses: list[tuple[float, dict]] = []
    wanted = topics.observation_topics() + [topics.commands, topics.episode_status]
    if instruction is not None:
        wanted.remove(topics.instruction)
        stream.set_instruction(instruction, 0)
    stream.set_cameras(topics.camera_sources())
    generation = stream.generation
    joint_names_seen: Counter = Counter()
    skipped: Counter = Counter()
    topic_counts: Counter = Counter()
    for m in read_messages(path, wanted, skipped=skipped):
        topic_counts[m.topic] += 1
        if m.topic == topics.commands:
            data = np.asarray(m.message.data, dtype=np.float64)
            if cmd_index is not None and data.shape == (len(cmd_names),) and np.all(np.isfinite(data)):
                cmd_t.append(stream.t_s(m.log_time_ns) if stream.epoch_ns is not None else None)
                cmd_q.append(data[cmd_index])
            continue
        if m.topic == topics.episode_status:
            try:
                status = json.loads(m.message.data)
                lifted = lifted or status.get("lifted")
                if stream.epoch_ns is not None:
                    statuses.append((stream.t_s(m.log_time_ns), status))
            except ValueError:
                log.warning("%s: unreadable episode status", path.name)
            continue
        if m.topic == topics.joint_states and hasattr(m.message, "name"):
            joint_names_seen[tuple(m.message.name)] += 1
        result = stream.add_message(m.type_name, m.message, m.log_time_ns, m.topic)
        if stream.generation != generation:  # a clock jump inside the bag: earlier windows are another timeline
            log.warning("%s: clock jumped back; keeping only what follows", path.name)
            generation = stream.generation
            windows, joint_t, joint_q, cmd_t, cmd_q, statuses = [], [], [], [], [], []
        if isinstance(result, Observation):
            if result.kind == Kind.IMAGE and result.camera == 0 and keep_windows:
                windows.append((result.t_s, stream.window()))
            elif result.kind == Kind.STATE:
                joint_t.append(result.t_s)
                joint_q.append(result.data[: len(joint_names)].astype(np.float64))
    # commands received before the first observation have no epoch yet: drop them
    keep = [i for i, t in enumerate(cmd_t) if t is not None]
    return Episode(
        path=path,
        windows=windows,
        observations=stream.window(),
        instruction=stream.instruction,
        joint_t_s=np.asarray(joint_t, dtype=np.float64),
        joint_positions=np.asarray(joint_q, dtype=np.float64).reshape(-1, len(joint_names)),
        command_t_s=np.asarray([cmd_t[i] for i in keep], dtype=np.float64),
        command_positions=np.asarray([cmd_q[i] for i in keep], dtype=np.float64).reshape(-1, len(joint_names)),
        stats=stream.stats.as_dict(),
        metadata=read_metadata(path),
        status=status,
        lifted=lifted,
        statuses=statuses,
        joint_names_seen=joint_names_seen,
        skipped_topics=skipped,
        topic_counts=topic_counts,
    )


def samples(
    episode: Episode,
    chunk_length: int,
    chunk_rate_hz: float,
    targets: str = "auto",
    every: int = 1,
) -> Iterator[Sample]:
    """Samples at every ``every``-th frame whose chunk has a target at its first point.

    Targets follow ``data.targets`` (the rules training uses): ``targets`` is the source, "commands",
    "joint_states", or "auto" (commands when the bag has at least two); points without a target are NaN.
    """
    if episode.instruction is None:
        log.warning("%s: no instruction in the bag; no samples", episode.path.name)
        return
    t_src, q_src, _source = target_track(
        episode.command_t_s, episode.command_positions, episode.joint_t_s, episode.joint_positions, targets
    )
    if len(t_src) < 2:
        return
    offsets = chunk_offsets_s(chunk_length, chunk_rate_hz)
    for i, (_t_frame, window) in enumerate(episode.windows):
        if i % every:
            continue
        t_ref = window[-1].t_s
        target_positions = chunk_targets(t_src, q_src, t_ref, offsets)
        if not chunk_usable(target_positions):
            continue
        yield Sample(
            episode=episode.path.name,
            observations=window,
            instruction=episode.instruction,
            t_s=t_ref,
            target_t_s=t_ref + offsets,
            target_positions=target_positions,
        )


def make_stream(tokenizer: TokenizerConfig, stream: StreamConfig, encode_text=None) -> TokenStream:
    """A fresh stream per episode (each bag is its own timeline)."""
    if encode_text is None:
        from vla_ros.tokens.text import shared_encoder

        encode_text = shared_encoder(tokenizer.max_text_tokens)
    return TokenStream(tokenizer, stream, encode_text)


def episode_paths(data_dir: str | Path) -> list[Path]:
    """One path per episode: each bag folder and loose MCAP file under ``data_dir`` (or ``data_dir`` itself).
    BagError (a ValueError with a one-line message) when there is none."""
    return find_bags(data_dir)
