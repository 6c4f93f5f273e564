"""One name per reason: the codes every node counts on /diagnostics are defined once, with their meanings."""

import pytest

from vla_ros import reasons
from vla_ros.joint_state_check import REASONS as JOINT_STATE_REASONS
from vla_ros.safety import POINT_REASONS
from vla_ros.safety import REASONS as FILTER_REASONS
from vla_ros.tokens.stream import TIMING_REJECTIONS

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


def test_every_code_has_one_constant_and_a_one_line_meaning():
    constants = {k: v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)}
    codes = [v for k, v in constants.items() if v in reasons.MEANINGS]
    assert len(codes) == len(set(codes)) == len(reasons.MEANINGS)  # one constant per code
    for code, meaning in reasons.MEANINGS.items():
        assert code == code.lower() and " " not in code and constants[code.upper()] == code
        assert meaning and "\n" not in meaning and len(meaning) <= 110, code


def test_the_groups_the_nodes_use_hold_defined_codes_only():
    groups = (FILTER_REASONS, POINT_REASONS, JOINT_STATE_REASONS, TIMING_REJECTIONS, reasons.EXPECTED_AT_RESET)
    for group in groups:
        assert set(group) <= set(reasons.MEANINGS), set(group) - set(reasons.MEANINGS)
    assert len(FILTER_REASONS) == len(set(FILTER_REASONS))


def test_the_filter_and_the_controller_say_the_same_for_the_same_refusal():
    # (the names the controller used before issue 45 are gone)
    assert {"too_long", "stale", "stamp_in_future", "future"}.isdisjoint(reasons.MEANINGS)
    for code in (reasons.TOO_MANY_POINTS, reasons.STALE_CHUNK, reasons.FUTURE_STAMP, reasons.BEFORE_RESET):
        assert code in FILTER_REASONS
