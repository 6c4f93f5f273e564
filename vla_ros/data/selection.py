"""Which parts of a user's bags train the policy, and why a bag did not.

:class:`BagSelection` names the topics (camera, joint states, commands, instruction), the joint order of
the commands, and an instruction for bags that record none: what another robot's bags need. Training
replays every bag with it; :class:`Diagnosis` collects, per skipped bag, the reason and what was found
(joint names, topics, the token stream's rejections) so that "no usable episodes" says what to change.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from vla_ros.data.dataset import Episode, Topics


@dataclasses.dataclass(frozen=True)
class BagSelection:
    """Args:
    topics: topic names in the bags.
    instruction: the task of every bag; the instruction topic is then not read.
    command_joint_names: joint order of the Float64MultiArray commands; None = the model's joint order.
    """

    topics: Topics = Topics()
    instruction: str | None = None
    command_joint_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.instruction is not None and not self.instruction.strip():
            raise ValueError("instruction must not be empty")


class NoUsableEpisodes(ValueError):
    """Nothing in the bags can train the policy; the message says why and what was found."""


@dataclasses.dataclass
class Diagnosis:
    """Accumulates what each skipped bag had, for one readable explanation."""

    selection: BagSelection
    joint_names: tuple[str, ...]  # what the model expects
    bags: int = 0
    skipped: Counter = dataclasses.field(default_factory=Counter)  # reason -> bags
    rejected: Counter = dataclasses.field(default_factory=Counter)  # token stream rejections, by code
    joint_names_seen: Counter = dataclasses.field(default_factory=Counter)
    topic_counts: Counter = dataclasses.field(default_factory=Counter)
    skipped_topics: Counter = dataclasses.field(default_factory=Counter)

    def add(self, episode: Episode, reason: str | None) -> None:
        self.bags += 1
        self.skipped_topics.update(episode.skipped_topics)
        if reason is None:
            return
        self.skipped[reason] += 1
        self.rejected.update(
            {k[len("rejected.") :]: v for k, v in episode.stats.items() if k.startswith("rejected.") and v}
        )
        self.joint_names_seen.update(episode.joint_names_seen)
        self.topic_counts.update(episode.topic_counts)

    def explain(self, where: str) -> str:
        t = self.selection.topics
        parts = [f"no usable episodes in {self.bags} bag(s) under {where} (skipped: {dict(self.skipped)})"]
        if self.rejected:
            parts.append(
                "token stream rejections: " + ", ".join(f"{code} {n}" for code, n in self.rejected.most_common())
            )
        if self.joint_names_seen:
            names = [list(n) for n, _ in self.joint_names_seen.most_common(3)]
            parts.append(
                f"joint states on {t.joint_states} name {names[0]}"
                + (f" (and {names[1:]})" if len(names) > 1 else "")
                + f"; the model expects {list(self.joint_names)}: pass --joints with the names in the order to learn"
            )
        else:
            parts.append(f"no joint states on {t.joint_states} (pass --joint-states-topic)")
        read = {
            topic: self.topic_counts.get(topic, 0)
            for topic in dict.fromkeys([t.image, t.compressed_image, t.joint_states, t.commands])
        }
        if self.selection.instruction is None:
            read[t.instruction] = self.topic_counts.get(t.instruction, 0)
        parts.append("messages read: " + ", ".join(f"{topic} {n}" for topic, n in read.items()))
        if "no_instruction" in self.skipped:
            parts.append(
                f"no instruction on {t.instruction}: pass --instruction-topic, or --instruction 'the task' for the "
                "whole bag"
            )
        if "no_targets" in self.skipped:
            parts.append(
                f"nothing to learn: fewer than two commands on {t.commands} (std_msgs/Float64MultiArray, one value per "
                "joint; pass --command-topic) and fewer than two usable joint states"
            )
        if "no_frames" in self.skipped:
            parts.append(f"no usable camera frames on {t.image} (pass --camera-topic)")
        if self.skipped_topics:
            parts.append(
                "topics skipped while reading: " + ", ".join(f"{k} ({n})" for k, n in self.skipped_topics.items())
            )
        return "; ".join(parts)

    def error(self, where: str | Path) -> NoUsableEpisodes:
        return NoUsableEpisodes(self.explain(str(where)))


def unusable_reason(episode: Episode) -> str | None:
    """Why a replayed bag cannot train the policy (None when it can), first reason first."""
    from vla_ros.tokens import Kind

    if episode.success is False:
        return "not_successful"
    if episode.instruction is None:
        return "no_instruction"
    if not any(o.kind == Kind.STATE for o in episode.observations):
        return "no_joint_states"
    if len(episode.command_t_s) < 2 and len(episode.joint_t_s) < 2:
        return "no_targets"  # targets are the commands, else the measured joint states (data.targets)
    if not any(o.kind == Kind.IMAGE for o in episode.observations):
        return "no_frames"
    return None
