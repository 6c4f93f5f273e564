"""The token stream: every accepted message becomes a timed observation in a rolling time window.

Nothing is paired or resampled to make the 30 Hz camera and the 100 Hz joints line up: each message keeps
its own header stamp. The window keeps everything no older than ``window_s`` before the newest stamp, in
time order. Rules, applied to each message in this order (each rejection counted under its reason):

0. ``unknown_camera``: with a camera map (``cameras``), a frame from a topic that is none of the model's
   cameras (before any timing rule: a foreign frame must not move the window);
1. clock jump: the receive clock went back more than ``clock_jump_s`` (a simulator reset) -> the window is
   cleared, the jump counted, and the message starts the new timeline (unless ``begin_episode`` already
   announced that restart: one reset, not two);
2. ``before_reset``: stamped before the start of the episode ``begin_episode`` announced;
3. ``future_stamp``: stamped more than ``max_future_s`` ahead of the receive clock;
4. ``late``: stamped more than ``lateness_s`` before the newest stamp a consumer already took with ``drain()``
   (before the first drain: the newest stamp accepted, unless the stream is ``consumer_paced``, then nothing
   is late yet); within it, it is inserted in order. A consumer that inserts late observations exactly (the
   policy runtime) can take everything this admits, however the sources interleave between two drains;
5. ``duplicate``: same (stamp, kind, source) as a token in the window;
6. ``thinned`` (only with ``min_frame_interval_s``): a frame stamped closer than that to a frame of the same
   camera in the window; counted apart from the rejections (``stats.thinned``): the model reads fewer frames
   than the camera sends, by design, and the frame is never decoded;
7. content: the converter's reason (``unknown_encoding``, ``joint_state_non_finite``, ``joint_state_missing_joint``,
...);
   and a frame whose encoding or size differs from the first frame the stream accepted from its camera
   (``wrong_image_encoding``, ``wrong_image_size``): a camera relabelled or reconfigured mid-run is refused,
   not reinterpreted (with ``input_width``/``input_height`` configured, that size is the one required).

Rules 2-5 are about timing (``TIMING_REJECTIONS``: a loaded machine or a reset causes them); the others
about what was sent.

Bookkeeping that tests check: ``received == accepted + rejected + thinned`` and
``accepted == in window + evicted + cleared``. Consumers (the policy session) take new observations with
``drain()`` and restart from ``window()`` when ``generation`` changes (a clock jump or a new episode).
Observations that leave the window before a consumer drained them are counted as ``unused`` (by kind).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections import Counter
from collections.abc import Callable

import numpy as np

from vla_ros import reasons
from vla_ros.timeline import EpisodeTimeline
from vla_ros.tokens.config import StreamConfig, TokenizerConfig
from vla_ros.tokens.convert import (
    JointStateConverter,
    TokenError,
    instruction_text,
    preprocess_image,
    rgb_from_compressed_msg,
    rgb_from_image_msg,
)
from vla_ros.tokens.types import Instruction, Kind, Observation

log = logging.getLogger(__name__)

NS = 1_000_000_000


TIMING_REJECTIONS = reasons.TIMING

_HANDLERS = {
    "sensor_msgs/Image": "add_image",
    "sensor_msgs/CompressedImage": "add_compressed_image",
    "sensor_msgs/JointState": "add_joint_state",
    "std_msgs/String": "set_instruction",
}


def stamp_ns(msg) -> int:
    """header.stamp of a message as integer nanoseconds (works on rclpy and MCAP-decoded messages)."""
    stamp = msg.header.stamp
    sec, nanosec = int(stamp.sec), int(stamp.nanosec)
    if not 0 <= nanosec < NS:
        raise TokenError("bad_stamp", f"header.stamp.nanosec={nanosec} is outside [0, 1e9)")
    return sec * NS + nanosec


def unused_key(obs: Observation) -> str:
    """``StreamStats.unused`` counts by kind, and a further camera's frames apart (``image_1``, ...)."""
    return obs.kind.name.lower() + (f"_{obs.camera}" if obs.camera else "")


@dataclasses.dataclass
class StreamStats:
    """Counters; ``rejected`` is keyed by reason code."""

    received: int = 0
    accepted: Counter = dataclasses.field(default_factory=Counter)  # by kind name
    rejected: Counter = dataclasses.field(default_factory=Counter)  # by reason
    thinned: int = 0  # frames left out by min_frame_interval_s (not rejections)
    reordered: int = 0  # accepted although older than the newest stamp (inserted in time order)
    evicted: int = 0
    cleared: int = 0  # removed by a clock jump or a new episode
    clock_jumps: int = 0
    episodes: int = 0  # episode starts announced with begin_episode that restarted the window
    instructions: int = 0
    unused: Counter = dataclasses.field(default_factory=Counter)  # by kind: accepted, evicted before drain()

    def as_dict(self) -> dict[str, int]:
        out = {"received": self.received, "accepted": sum(self.accepted.values())}
        out.update({f"accepted.{k}": v for k, v in sorted(self.accepted.items())})
        out["rejected"] = sum(self.rejected.values())
        out.update({f"rejected.{k}": v for k, v in sorted(self.rejected.items())})
        out.update(
            thinned=self.thinned,
            reordered=self.reordered,
            evicted=self.evicted,
            cleared=self.cleared,
            clock_jumps=self.clock_jumps,
            episodes=self.episodes,
        )
        out.update({f"unused.{k}": v for k, v in sorted(self.unused.items())})
        return out


class TokenStream:
    """Rolling, time-ordered window of observations plus the pinned instruction.

    ``now_ns`` arguments are the receive time on the consumer's clock (the node's clock online, the MCAP
    log time offline); pass None when unknown (the future check is then skipped). ``consumer_paced``: a
    live consumer drains it (``late`` is measured from what it took only).
    """

    def __init__(
        self,
        tokenizer: TokenizerConfig | None = None,
        stream: StreamConfig | None = None,
        encode_text: Callable[[str], Instruction] | None = None,
        consumer_paced: bool = False,
        cameras: dict[str, int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer or TokenizerConfig()
        # image source (topic) -> camera index of the model; frames of any other source are camera 0
        self._cameras = dict(cameras or {})
        self._consumer_paced = consumer_paced
        self.config = stream or StreamConfig()
        self._encode_text = encode_text
        self._joints = JointStateConverter(self.tokenizer)
        self._window_ns = round(self.config.window_s * NS)
        self._lateness_ns = round(self.config.lateness_s * NS)
        self._future_ns = round(self.config.max_future_s * NS)
        # The receive clock going back more than clock_jump_s is a restart; an announced episode start that
        # far before the newest stamp held is one too (stamps and receive times alike).
        jump_ns = round(self.config.clock_jump_s * NS)
        self.timeline = EpisodeTimeline(grace_ns=jump_ns, jump_tolerance_ns=jump_ns)
        self._frame_interval_ns = round(self.config.min_frame_interval_s * NS)
        self.stats = StreamStats()
        self.instruction: Instruction | None = None
        self.instruction_generation = 0  # bumps on every new instruction: the policy rebuilds its cache
        self.generation = 0  # bumps on every clock jump and new episode: consumers start over
        self.last_rejection = ""
        self.last_rejection_code = ""
        self._formats: dict[
            int, tuple[str, int, int]
        ] = {}  # camera -> (encoding, width, height) of its first accepted frame
        self._reset_window()

    # ---- state -------------------------------------------------------------------------------------
    def _reset_window(self) -> None:
        self._items: list[Observation] = []
        self._keys: list[tuple[int, int, str]] = []
        self._pending: list[Observation] = []
        self.epoch_ns: int | None = None
        self.newest_ns: int | None = None
        self.consumed_ns: int | None = None  # newest stamp drain() has handed out
        self._seq = 0

    @property
    def episode_start_ns(self) -> int | None:
        """The start of the episode ``begin_episode`` announced (older stamps are refused), or None."""
        return self.timeline.start_ns

    def window(self) -> list[Observation]:
        """The observations in the window, oldest first (a copy: safe to keep)."""
        return list(self._items)

    def newest(self, kind: Kind, camera: int | None = None) -> Observation | None:
        """The newest observation of ``kind`` (and of ``camera``, when given) in the window (None: none)."""
        for obs in reversed(self._items):
            if obs.kind == kind and (camera is None or obs.camera == camera):
                return obs
        return None

    def newest_stamp(self, kind: Kind, camera: int | None = None) -> int | None:
        """Stamp of the newest observation of ``kind`` (and ``camera``) in the window (None: none)."""
        obs = self.newest(kind, camera)
        return None if obs is None else obs.stamp_ns

    def __len__(self) -> int:
        return len(self._items)

    def drain(self, restart: bool = False, upto_ns: int | None = None) -> list[Observation]:
        """Observations accepted since the last call that are still in the window, in time order. Those
        that already left it (a consumer slower than the window) are counted in ``stats.unused``. With
        ``restart`` (a consumer that starts over): the whole window. With ``upto_ns``: only observations
        stamped up to it; newer ones stay pending for a later call."""
        if restart:
            self._pending = []
            out = list(self._items)
        else:
            oldest = self._keys[0] if self._keys else None
            out = sorted((o for o in self._pending if oldest is not None and o.key >= oldest), key=lambda o: o.key)
            if len(out) != len(self._pending):
                kept = {id(o) for o in out}
                for o in self._pending:
                    if id(o) not in kept:
                        self.stats.unused[unused_key(o)] += 1
            self._pending = []
        if upto_ns is not None:
            held = [o for o in out if o.stamp_ns > upto_ns]
            if held:
                out = out[: len(out) - len(held)]  # sorted by key, stamp first: the held ones are the tail
                self._pending = held
        if out and (self.consumed_ns is None or out[-1].stamp_ns > self.consumed_ns):
            self.consumed_ns = out[-1].stamp_ns
        return out

    def t_s(self, stamp: int) -> float:
        """Seconds since the epoch for a ROS stamp in ns (exact integer difference, then float64)."""
        return (stamp - (self.epoch_ns if self.epoch_ns is not None else stamp)) / NS

    # ---- admission ----------------------------------------------------------------------------------
    def _reject(self, code: str, detail: str) -> None:
        self.stats.rejected[code] += 1
        self.last_rejection = f"{code}: {detail}"
        self.last_rejection_code = code

    def _check_time(self, kind: Kind, source: str, stamp: int, now_ns: int | None) -> str | None:
        """Clock-jump handling, then the time rules; returns a rejection code or None."""
        timeline = self.timeline
        if now_ns is not None:  # the highest receive time seen: small clock wobbles are not jumps
            jumped = timeline.observe_clock(now_ns) > 0
        else:
            jumped = timeline.jumped_back(stamp, self.newest_ns)
        if jumped:
            if self._announced_restart(stamp if now_ns is None else now_ns):
                timeline.restart_clock(now_ns)  # begin_episode already restarted the window for this jump
            else:
                self.clock_jump(now_ns)
        if timeline.before_episode(stamp):
            return reasons.BEFORE_RESET
        if now_ns is not None and stamp > now_ns + self._future_ns:
            return reasons.FUTURE_STAMP
        reference = self.consumed_ns if self.consumed_ns is not None or self._consumer_paced else self.newest_ns
        if reference is not None and stamp < reference - self._lateness_ns:
            return reasons.LATE
        key = (stamp, int(kind), source)
        i = bisect.bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i] == key:
            return reasons.DUPLICATE
        return None

    def clock_jump(self, now_ns: int | None = None) -> None:
        """Clear the window (time went backwards); the instruction stays pinned. An announced episode
        start belongs to the old timeline and is forgotten."""
        n = len(self._items)
        self.stats.cleared += n
        self.stats.clock_jumps += 1
        self.generation += 1
        log.warning("clock jumped back: cleared %d observations", n)
        self._reset_window()
        self.timeline.set_start(None)
        self.timeline.restart_clock(now_ns)

    def _announced_restart(self, now_ns: int) -> bool:
        """True when a backwards jump of the clock to ``now_ns`` is the restart ``begin_episode`` already
        handled: the new time is in the announced episode and the window holds nothing newer than it."""
        if not self.timeline.contains(now_ns):
            return False
        return self.newest_ns is None or self.newest_ns <= now_ns + self._future_ns

    def set_state_velocity_limits(self, velocity) -> None:
        """Joint states that jump further than these limits allow are refused (``joint_state_check``)."""
        self._joints.set_velocity_limits(velocity)

    def begin_episode(self, start_ns: int) -> bool:
        """A new episode begins at ``start_ns`` (the sim's ``/vla/episode_reset`` stamp): every observation
        stamped before it leaves the window and later ones stamped before it are refused (``before_reset``).

        A start far (``clock_jump_s``) before the newest stamp held announces a clock that restarts: the whole
        window is the previous episode's. The window restarts (``generation`` bumps, the epoch moves to the
        first kept stamp) unless it already began inside this episode: after a clock jump that came first, or for the
        same announcement again.
        A clock jump that follows the announcement is then recognised as the same restart (one reset, not
        two). Returns True when the window restarted.
        """
        start_ns = int(start_ns)
        self.timeline.set_start(start_ns)
        self._joints.forget()  # the arm was placed anew: its next state is no jump
        # Far before what the window holds: the clock restarts (reset_clock_on_reset), everything held is old.
        restarts_clock = self.timeline.restarts(start_ns, self.newest_ns)
        keep = [] if restarts_clock else [o for o in self._items if o.stamp_ns >= start_ns]
        if len(keep) == len(self._items) and (self.epoch_ns is None or self.epoch_ns >= start_ns):
            return False
        self.stats.cleared += len(self._items) - len(keep)
        self.stats.episodes += 1
        self.generation += 1
        self._reset_window()
        if keep:  # the new episode's first observations: same stamps, times from the new epoch
            self.epoch_ns = keep[0].stamp_ns
            self._items = [dataclasses.replace(o, t_s=self.t_s(o.stamp_ns)) for o in keep]
            self._keys = [o.key for o in self._items]
            self._pending = list(self._items)
            self.newest_ns = max(o.stamp_ns for o in keep)
            self._seq = max(o.seq for o in keep)
        return True

    def add(
        self, kind: Kind, source: str, stamp: int, convert: Callable[[], np.ndarray], now_ns: int | None = None
    ) -> Observation | None:
        """Admit one message: ``convert()`` runs only when the timing rules pass (a late frame is not decoded)."""
        self.stats.received += 1
        camera = self.camera_of(source) if kind == Kind.IMAGE else 0
        if camera is None:
            self._reject(
                reasons.UNKNOWN_CAMERA, f"{source}: not one of the model's camera topics {sorted(self._cameras)}"
            )
            return None
        code = self._check_time(kind, source, stamp, now_ns)
        if code is not None:
            detail = (
                f"{source} stamp {stamp * 1e-9:.6f} s (newest {((self.newest_ns or 0) * 1e-9):.6f} s, now {now_ns})"
            )
            self._reject(code, detail)
            return None
        if kind == Kind.IMAGE and self._frame_interval_ns and self._near_frame(stamp, camera):
            self.stats.thinned += 1  # not a rejection: last_rejection stays what it was
            return None
        try:
            data = convert()
        except TokenError as err:
            self._reject(err.code, f"{source}: {err}")
            return None
        if self.epoch_ns is None:
            self.epoch_ns = stamp
        self._seq += 1
        obs = Observation(
            kind=kind, stamp_ns=stamp, t_s=self.t_s(stamp), seq=self._seq, data=data, source=source, camera=camera
        )
        self._insert(obs)
        return obs

    def _near_frame(self, stamp: int, camera: int) -> bool:
        """Whether the window holds a frame of ``camera`` stamped within the thinning interval of ``stamp``."""
        i = bisect.bisect_left(self._keys, (stamp - self._frame_interval_ns + 1, -1, ""))
        for obs in self._items[i:]:
            if obs.stamp_ns >= stamp + self._frame_interval_ns:
                return False
            if obs.kind == Kind.IMAGE and obs.camera == camera:
                return True
        return False

    def set_cameras(self, cameras: dict[str, int]) -> None:
        """Image source (topic) -> camera index, for the frames added from now on."""
        self._cameras = dict(cameras)

    def camera_of(self, source: str) -> int | None:
        """The camera index of an image source; ``<topic>/compressed`` is the camera of ``<topic>``. Without
        a camera map every source is camera 0; with one, a source outside it is None (rejected as
        ``unknown_camera``: frames of a camera the model does not read must not pass for its main view)."""
        if not self._cameras:
            return 0
        if source not in self._cameras and source.endswith("/compressed"):
            source = source[: -len("/compressed")]
        return self._cameras.get(source)

    def _insert(self, obs: Observation) -> None:
        key = obs.key
        if self._keys and key < self._keys[-1]:
            i = bisect.bisect_left(self._keys, key)
            self.stats.reordered += 1
        else:
            i = len(self._keys)
        self._keys.insert(i, key)
        self._items.insert(i, obs)
        self._pending.append(obs)
        self.stats.accepted[obs.kind.name.lower()] += 1
        if self.newest_ns is None or obs.stamp_ns > self.newest_ns:
            self.newest_ns = obs.stamp_ns
            self._evict()

    def _evict(self) -> None:
        """Drop observations more than window_s older than the newest stamp."""
        cutoff = self.newest_ns - self._window_ns
        n = bisect.bisect_left(self._keys, (cutoff, -1, ""))
        if n:
            del self._keys[:n], self._items[:n]
            self.stats.evicted += n

    # ---- messages -------------------------------------------------------------------------------------
    def _stamp_or_reject(self, msg) -> int | None:
        try:
            return stamp_ns(msg)
        except TokenError as err:
            self.stats.received += 1
            self._reject(err.code, str(err))
            return None

    def add_image(self, msg, now_ns: int | None = None, source: str = "/camera/image_raw") -> Observation | None:
        """sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8)."""
        stamp = self._stamp_or_reject(msg)
        if stamp is None:
            return None
        encoding = str(msg.encoding).lower()
        return self.add(
            Kind.IMAGE,
            source,
            stamp,
            lambda: self._frame(source, encoding, rgb_from_image_msg(msg, self.tokenizer)),
            now_ns,
        )

    def add_compressed_image(
        self, msg, now_ns: int | None = None, source: str = "/camera/image_raw/compressed"
    ) -> Observation | None:
        """sensor_msgs/CompressedImage (jpeg, png; a change between them is no change of encoding)."""
        stamp = self._stamp_or_reject(msg)
        if stamp is None:
            return None
        return self.add(
            Kind.IMAGE,
            source,
            stamp,
            lambda: self._frame(source, "compressed", rgb_from_compressed_msg(msg, self.tokenizer)),
            now_ns,
        )

    def _frame(self, source: str, encoding: str, rgb: np.ndarray) -> np.ndarray:
        """The model's input from one camera's RGB frame, refused when its encoding or size is not that of the
        camera's first accepted frame (rule 7; a raw frame's RGB is a view, so nothing is copied before)."""
        camera = self.camera_of(source) or 0  # add() refused frames of other cameras before converting
        fmt = (encoding, rgb.shape[1], rgb.shape[0])
        first = self._formats.get(camera)
        if first is not None and fmt[1:] != first[1:]:
            raise TokenError(
                "wrong_image_size",
                f"image is {fmt[1]}x{fmt[2]}, the camera's first frame was "
                f"{first[1]}x{first[2]}: a resized camera is refused, not rescaled",
            )
        if first is not None and encoding != first[0]:
            raise TokenError(
                "wrong_image_encoding",
                f"image encoding {encoding!r}, the camera's first frame "
                f"was {first[0]!r}: a relabelled camera is refused, not reinterpreted",
            )
        data = preprocess_image(rgb, self.tokenizer)
        self._formats.setdefault(camera, fmt)
        return data

    def add_joint_state(self, msg, now_ns: int | None = None, source: str = "/joint_states") -> Observation | None:
        if not self._joints.concerns(msg.name):
            return None  # another driver's joints only: not an observation of this state
        stamp = self._stamp_or_reject(msg)
        if stamp is None:
            return None
        return self.add(Kind.STATE, source, stamp, lambda: self._joints(msg, stamp), now_ns)

    def add_message(self, type_name: str, msg, now_ns: int | None, source: str) -> Observation | Instruction | None:
        """Dispatch by ROS type name ('sensor_msgs/msg/Image', ...): the one entry point the policy node and
        the offline dataset reader share, so both paths turn the same messages into the same tokens."""
        handler = _HANDLERS.get(type_name.replace("/msg/", "/"))
        if handler is None:
            self.stats.received += 1
            self._reject(reasons.UNSUPPORTED_TYPE, f"{source}: {type_name} is not an observation type")
            return None
        if handler == "set_instruction":
            return self.set_instruction(msg.data, now_ns)
        return getattr(self, handler)(msg, now_ns, source)

    def set_instruction(self, text: str, now_ns: int | None = None) -> Instruction | None:
        """std_msgs/String data -> pinned text tokens. The same text again changes nothing."""
        self.stats.received += 1
        try:
            cleaned = instruction_text(text)
        except TokenError as err:
            self._reject(err.code, str(err))
            return None
        if self._encode_text is None:
            self._reject(reasons.NO_TEXT_ENCODER, "this stream has no text encoder")
            return None
        self.stats.instructions += 1
        self.stats.accepted["text"] += 1
        if self.instruction is not None and self.instruction.text == cleaned:
            return self.instruction
        instruction = self._encode_text(cleaned)
        self.instruction = dataclasses.replace(instruction, stamp_ns=int(now_ns or 0))
        self.instruction_generation += 1
        return self.instruction

    def counts_add_up(self) -> bool:
        """The bookkeeping invariant (also checked by the property tests)."""
        s = self.stats
        observations = sum(v for k, v in s.accepted.items() if k != "text")
        return (
            s.received == sum(s.accepted.values()) + sum(s.rejected.values()) + s.thinned
            and observations == len(self._items) + s.evicted + s.cleared
        )
