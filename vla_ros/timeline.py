"""Episodes and clock restarts as every node sees them: one timeline, one set of rules (no rclpy import).

A simulator resets the world under the nodes. It says so (``/vla/episode_reset``, see ``docs/episode_reset.md``:
the new episode's start stamp and number), and with ``reset_clock_on_reset`` its clock also restarts at 0: a
backwards clock jump. The token stream, the safety filter node and the controller's executor all keep an
``EpisodeTimeline`` and ask it the same questions:

- Which episode is current, and when did it begin? (``announce``; a repeat of the announcement in force
  changes nothing; the first one a node hears is the episode already running when it started, not a reset.)
- Is a message from before it? (``before_episode``: stamped before the start, refused as ``before_reset``.)
- Does a stamp lead the clock by more than the grace? (``ahead``: message stamps may lead a simulated
  ``/clock`` by a step; a restart moves time back by far more.)
- Does an announced start lie so far before the clock that time must have restarted? (``restarts``.)
- Did the clock go backwards? (``observe_clock``: by more than ``jump_tolerance_ns`` below the highest
  reading, so small wobbles are not jumps.) An episode start the jump leaves in the future belongs to the
  discarded timeline and is forgotten (``start_by``, ``take_jump``).
- Are the announcement and the jump the same reset? Either may come first; they count as one reset, not
  two. An announced restart promises a jump (``expect_jump``; ``take_jump`` then returns True), and a jump
  that came first is claimed by an announcement whose episode contains the new time (``claim_jump``), each
  within ``pair_window_ns`` (``expire``).

Worked example (grace 0.1 s, the controller's executor): at t = 12.0 s the sim announces episode 4 starting
at 0.0 s. ``restarts(0, 12.0 s)`` is True, so ``expect_jump(12.0 s)`` waits until 13.0 s. At the next cycle
the clock reads 0.01 s: ``observe_clock`` reports a jump of 11.99 s and ``take_jump`` returns True: the
announced reset's own jump, counted once. A joint state stamped 11.99 s (in flight before the reset) lies
``ahead`` of the clock (11.98 s > 0.1 s) and is not used for re-anchoring.
"""

from __future__ import annotations

import dataclasses

# Message stamps up to this far ahead of a node's clock still count as "now" (stamps may lead a simulated
# /clock by a step); a reset moves time back by far more than this.
STAMP_GRACE_NS = 100_000_000
# How long an announcement and a clock jump wait for each other to count as one reset (of the old timeline's
# time for an announced restart, of the new one's for a jump that came first).
PAIR_WINDOW_NS = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class Announcement:
    """An episode announcement that changed the timeline (``EpisodeTimeline.announce``).

    Args:
        start_ns: when the episode began (ROS time).
        episode: its number or name as announced (None when the announcement carries none).
        first: the first announcement this timeline heard: the episode running when the node started, not a
            reset.
        restarts_clock: a reset whose start lies before the clock by more than the grace: time restarts
            (``reset_clock_on_reset``), so everything received so far belongs to the old timeline.
    """

    start_ns: int
    episode: object
    first: bool
    restarts_clock: bool


class EpisodeTimeline:
    """The current episode's start and the clock's history, for one consumer.

    ``grace_ns``: how far a stamp may lead the clock (and an episode start trail it) and still count as now.
    ``jump_tolerance_ns``: how far the clock may go back below its highest reading without being a jump.
    ``pair_window_ns``: how long an announcement and its clock jump wait for each other.
    """

    def __init__(
        self, grace_ns: int = STAMP_GRACE_NS, jump_tolerance_ns: int = 0, pair_window_ns: int = PAIR_WINDOW_NS
    ) -> None:
        if grace_ns < 0 or jump_tolerance_ns < 0 or pair_window_ns < 0:
            raise ValueError(
                f"tolerances must be >= 0 (grace_ns={grace_ns}, jump_tolerance_ns={jump_tolerance_ns}, "
                f"pair_window_ns={pair_window_ns})"
            )
        self.grace_ns = int(grace_ns)
        self.jump_tolerance_ns = int(jump_tolerance_ns)
        self.pair_window_ns = int(pair_window_ns)
        self.start_ns: int | None = None  # refused before this (None: no episode in force)
        self.episode: object = None  # the announced episode's number or name
        self._announced: tuple[object, int] | None = None  # (episode, start) of the last announcement
        self.last_now_ns: int | None = None  # the highest clock reading of the current timeline
        self._jump_due_until_ns: int | None = None  # an announced restart waits for its jump until then
        self._jump_landed_ns: int | None = None  # an unannounced jump landed here, waiting for its announcement

    # ---- stamps against the clock ------------------------------------------------------------------
    def ahead(self, stamp_ns: int, now_ns: int) -> bool:
        """Whether ``stamp_ns`` lies more than the grace after ``now_ns`` (from before a backwards jump)."""
        return stamp_ns > now_ns + self.grace_ns

    def restarts(self, start_ns: int, reference_ns: int | None) -> bool:
        """Whether an episode starting at ``start_ns`` lies more than the grace before ``reference_ns`` (the
        clock, or the newest stamp held): time restarts. False without a reference."""
        return reference_ns is not None and start_ns + self.grace_ns < reference_ns

    # ---- the episode -------------------------------------------------------------------------------
    @property
    def announced(self) -> bool:
        """Whether any episode was announced."""
        return self._announced is not None

    def announce(self, start_ns: int, episode: object = None, now_ns: int | None = None) -> Announcement | None:
        """Episode ``episode`` began at ``start_ns`` (the announcement, heard at ``now_ns`` when known). None
        for a repeat of the announcement in force (nothing changes, even when its start was forgotten since)."""
        start_ns = int(start_ns)
        if self._announced == (episode, start_ns):
            return None
        first = self._announced is None
        self._announced = (episode, start_ns)
        self.episode, self.start_ns = episode, start_ns
        return Announcement(start_ns, episode, first, not first and self.restarts(start_ns, now_ns))

    def set_start(self, start_ns: int | None) -> None:
        """Move the episode's start without an announcement (a re-anchor: older inputs are refused), or
        forget it (None)."""
        self.start_ns = None if start_ns is None else int(start_ns)

    def before_episode(self, stamp_ns: int) -> bool:
        """Whether ``stamp_ns`` lies before the current episode's start."""
        return self.start_ns is not None and stamp_ns < self.start_ns

    def start_by(self, now_ns: int) -> int | None:
        """The episode's start, forgotten first when it lies ahead of ``now_ns`` (time restarted without an
        announcement: every message would otherwise be refused as before the episode)."""
        if self.start_ns is not None and self.ahead(self.start_ns, now_ns):
            self.start_ns = None
        return self.start_ns

    def contains(self, now_ns: int) -> bool:
        """Whether an episode is in force and ``now_ns`` is in it (not more than the grace before its start)."""
        return self.start_ns is not None and not self.ahead(self.start_ns, now_ns)

    # ---- the clock ---------------------------------------------------------------------------------
    def jumped_back(self, t_ns: int, reference_ns: int | None) -> bool:
        """Whether ``t_ns`` lies more than the jump tolerance before ``reference_ns`` (None: no reference)."""
        return reference_ns is not None and t_ns < reference_ns - self.jump_tolerance_ns

    def observe_clock(self, now_ns: int) -> int:
        """A clock reading. Returns how far (ns) it went back below the highest reading when that is a jump
        (the reading then starts the new timeline), else 0 (the highest reading is kept)."""
        last = self.last_now_ns
        if self.jumped_back(now_ns, last):
            self.restart_clock(now_ns)
            return last - now_ns
        self.last_now_ns = now_ns if last is None else max(last, now_ns)
        return 0

    def restart_clock(self, now_ns: int | None) -> None:
        """The clock starts a new timeline at ``now_ns`` (None: no reading yet)."""
        self.last_now_ns = now_ns

    # ---- one reset, not two ------------------------------------------------------------------------
    def expect_jump(self, now_ns: int) -> None:
        """An announced restart: the clock jump that comes with it within the pair window is the same reset."""
        self._jump_due_until_ns = now_ns + self.pair_window_ns

    @property
    def jump_expected(self) -> bool:
        """An announced restart waits for its clock jump (the old timeline's inputs are still arriving)."""
        return self._jump_due_until_ns is not None

    def take_jump(self, now_ns: int) -> bool:
        """A backwards clock jump to ``now_ns``. True when an announcement promised it (one reset, already
        handled). Otherwise it is a reset of its own: remembered for an announcement that may follow, and an
        episode start it leaves in the future is forgotten. Returns False then."""
        if self._jump_due_until_ns is not None:
            self._jump_due_until_ns = None
            return True
        self._jump_landed_ns = now_ns
        self.start_by(now_ns)
        return False

    def claim_jump(self, now_ns: int | None) -> bool:
        """After ``announce``: True when a clock jump came first and the announced episode contains ``now_ns``
        (the same reset: already handled); the jump is then paired and forgotten."""
        if self._jump_landed_ns is None or now_ns is None or self.start_ns is None or self.ahead(self.start_ns, now_ns):
            return False
        self._jump_landed_ns = None
        return True

    def expire(self, now_ns: int) -> bool:
        """Drop waits older than the pair window at ``now_ns``. True when an announced restart's jump did not
        come in time (the caller goes on without it)."""
        missed = self._jump_due_until_ns is not None and now_ns > self._jump_due_until_ns
        if missed:
            self._jump_due_until_ns = None
        if self._jump_landed_ns is not None and now_ns - self._jump_landed_ns > self.pair_window_ns:
            self._jump_landed_ns = None
        return missed
