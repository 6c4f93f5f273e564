"""The episode timeline shared by the token stream, the safety filter node and the controller's executor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_ros.timeline import PAIR_WINDOW_NS, STAMP_GRACE_NS, EpisodeTimeline

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NS = 1_000_000_000
MS = 1_000_000

times = st.integers(min_value=0, max_value=100 * NS)


def test_tolerances_must_not_be_negative():
    with pytest.raises(ValueError, match="grace_ns=-1"):
        EpisodeTimeline(grace_ns=-1)


@settings(max_examples=300, deadline=None)
@given(st.lists(times, min_size=1, max_size=40), st.sampled_from([0, 50 * MS, NS]))
def test_a_jump_is_the_clock_going_back_further_than_the_tolerance_below_its_highest_reading(readings, tolerance):
    timeline = EpisodeTimeline(jump_tolerance_ns=tolerance)
    highest = None
    for now in readings:
        back = timeline.observe_clock(now)
        if highest is not None and now < highest - tolerance:
            assert back == highest - now > tolerance
            highest = now  # the reading starts the new timeline
        else:
            assert back == 0
            highest = now if highest is None else max(highest, now)
        assert timeline.last_now_ns == highest


@settings(max_examples=300, deadline=None)
@given(times, times, st.integers(min_value=0, max_value=2 * NS))
def test_stamps_against_the_clock_use_one_grace(stamp, now, grace):
    timeline = EpisodeTimeline(grace_ns=grace)
    assert timeline.ahead(stamp, now) == (stamp - now > grace)
    assert timeline.restarts(stamp, now) == (now - stamp > grace)
    assert not timeline.restarts(stamp, None)
    assert not (timeline.ahead(stamp, now) and timeline.restarts(stamp, now))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(times, st.sampled_from(["1", "2", None])), min_size=1, max_size=20), times, times)
def test_an_announcement_changes_the_timeline_once_and_splits_stamps_at_its_start(announcements, now, stamp):
    timeline = EpisodeTimeline()
    in_force = None
    for start, episode in announcements:
        news = timeline.announce(start, episode, now)
        if (episode, start) == in_force:
            assert news is None  # a repeat changes nothing
        else:
            assert news.first == (in_force is None)
            assert news.restarts_clock == (not news.first and start + STAMP_GRACE_NS < now)
            in_force = (episode, start)
        assert (timeline.episode, timeline.start_ns) == in_force and timeline.announced
        assert timeline.before_episode(stamp) == (stamp < timeline.start_ns)


def test_a_start_the_clock_left_in_the_future_is_forgotten_and_stays_so_for_a_repeat():
    timeline = EpisodeTimeline()
    timeline.announce(50 * NS, 3)
    assert timeline.start_by(50 * NS - STAMP_GRACE_NS) == 50 * NS  # within the grace: still the episode
    assert timeline.contains(50 * NS - STAMP_GRACE_NS)
    assert timeline.start_by(2 * NS) is None  # time restarted without an announcement
    assert not timeline.before_episode(0) and not timeline.contains(2 * NS)
    assert timeline.announce(50 * NS, 3) is None and timeline.start_ns is None
    assert timeline.episode == 3


def test_an_announced_restart_and_its_jump_are_one_reset():
    timeline = EpisodeTimeline()
    timeline.announce(0, 1)
    timeline.observe_clock(12 * NS)
    news = timeline.announce(0, 2, 12 * NS)
    assert news.restarts_clock
    timeline.expect_jump(12 * NS)
    assert timeline.jump_expected and not timeline.expire(12 * NS + PAIR_WINDOW_NS)
    assert timeline.observe_clock(10 * MS) == 12 * NS - 10 * MS
    assert timeline.take_jump(10 * MS)  # promised: the same reset
    assert not timeline.jump_expected and timeline.start_ns == 0
    assert not timeline.take_jump(5 * MS)  # a second jump is a reset of its own


def test_an_announced_restart_whose_jump_does_not_come_expires():
    timeline = EpisodeTimeline()
    timeline.expect_jump(12 * NS)
    assert not timeline.expire(12 * NS + PAIR_WINDOW_NS)
    assert timeline.expire(12 * NS + PAIR_WINDOW_NS + 1) and not timeline.jump_expected
    assert not timeline.take_jump(NS)


@pytest.mark.parametrize(
    ("start", "later", "claimed"),
    [
        (0, 20 * MS, True),  # the announcement of the restart that already happened
        (10 * MS + STAMP_GRACE_NS, 10 * MS, True),  # within the grace of the new clock
        (5 * NS, 20 * MS, False),  # an episode that begins in the future of the new clock: another reset
        (0, 10 * MS + PAIR_WINDOW_NS + 1, False),  # too long after the jump to be the same reset
    ],
)
def test_a_jump_that_came_first_is_claimed_by_its_announcement(start, later, claimed):
    timeline = EpisodeTimeline()
    timeline.announce(30 * NS, 1)
    timeline.observe_clock(31 * NS)
    timeline.observe_clock(10 * MS)
    assert not timeline.take_jump(10 * MS)
    assert timeline.start_ns is None  # the old episode's start lies in the discarded future
    timeline.expire(later)
    timeline.announce(start, 2, later)
    assert timeline.claim_jump(later) == claimed
    assert not timeline.claim_jump(later)  # claimed once at most


def test_without_a_jump_an_announcement_claims_nothing():
    timeline = EpisodeTimeline()
    timeline.announce(0, 1)
    assert not timeline.claim_jump(NS) and not timeline.claim_jump(None)
