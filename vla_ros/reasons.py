"""Reason codes: why an input was refused, one name per reason in every node (no rclpy import).

A reason code is part of the interface: the nodes count every refusal on ``/diagnostics`` as
``rejected.<code>`` and name it in their logs, and a user greps for it. The policy (token stream, instruction
gate), the safety filter and the controller's executor refuse some of the same things (a chunk with too
many points, stamped too long ago or in the future, from before the episode began, a bad joint state); each
such reason has one code here, whichever node refuses it. ``MEANINGS`` maps every code to its one-line
meaning (what ``docs/safety_chain.md`` tabulates).

Levels: a refusal is reported at WARN wherever it is reported; none has a level of its own, except the
refusals ``EXPECTED_AT_RESET`` (the previous episode's messages still in flight when the simulator resets),
which are counted but do not turn a node's inputs status to WARN.
"""

from __future__ import annotations

MEANINGS: dict[str, str] = {}


def _reason(code: str, meaning: str) -> str:
    assert code not in MEANINGS, code
    MEANINGS[code] = meaning
    return code


# ---- a chunk that cannot be read as one (filter, controller) -----------------------------------------------
EMPTY_CHUNK = _reason("empty_chunk", "the chunk has no points")
SIZE_MISMATCH = _reason("size_mismatch", "positions, times, velocities and joint names do not line up")
TOO_MANY_POINTS = _reason(
    "too_many_points", "more points than max_chunk_points (filter and controller), counted before decoding"
)
NON_FINITE = _reason("non_finite", "a position, time or velocity is NaN or infinite (or not a number)")
UNKNOWN_JOINT = _reason("unknown_joint", "a joint the robot does not command (a mimic or passive joint, a typo)")
MISSING_JOINT = _reason("missing_joint", "a commanded joint is not in the chunk")
DUPLICATE_JOINT = _reason("duplicate_joint", "a joint name appears twice")
NEGATIVE_TIME = _reason("negative_time", "a point's time_from_start is negative")
NON_INCREASING_TIME = _reason("non_increasing_time", "a point's time_from_start is not after the previous one's")
HORIZON_TOO_LONG = _reason("horizon_too_long", "a point lies further ahead than max_horizon_s")
BAD_TIME = _reason(
    "bad_time", "times not finite, negative, not increasing or over an hour long (the controller's one time check)"
)

# ---- a chunk at the wrong time, or nothing to check it against ----------------------------------------------
UNSTAMPED = _reason("unstamped", "header.stamp is 0: a chunk must carry its observation time")
STALE_CHUNK = _reason("stale_chunk", "stamped longer ago than max_chunk_age_s (filter: or all its points past)")
FUTURE_STAMP = _reason("future_stamp", "stamped further ahead of the receiver's clock than it allows (clock mismatch?)")
BEFORE_RESET = _reason("before_reset", "stamped before the current episode began (planned for the previous one)")
EXPIRED = _reason("expired", "every point of the chunk lies in the past by the controller's clock")
NO_ROBOT_MODEL = _reason("no_robot_model", "the filter has no robot description yet")
INVALID_CONFIGURATION = _reason("invalid_configuration", "the filter's configuration is invalid for this robot")
NO_JOINT_STATE = _reason("no_joint_state", "no joint state received yet")
STALE_JOINT_STATE = _reason("stale_joint_state", "the joint state is older than max_state_age_s, or from the future")
JOINT_STATE_INCOMPLETE = _reason("joint_state_incomplete", "the joint state lacks a joint or has a non-finite one")
UNAUTHORIZED_SOURCE = _reason("unauthorized_source", "sent by a publisher not among the trusted ones")

# ---- the controller is not taking chunks --------------------------------------------------------------------
ESTOPPED = _reason("estopped", "the e-stop is latched (until resume)")
DISABLED = _reason("disabled", "the controller is disabled")
HELD = _reason("held", "the controller holds while an input cannot be trusted")

# ---- a point that is unsafe (filter: truncated before it; controller: the chunk refused) --------------------
UNREACHABLE_FIRST_POINT = _reason("unreachable_first_point", "the first point is too fast to reach from the arm")
POSITION_LIMIT = _reason("position_limit", "a point lies outside the position limits (minus the margin)")
VELOCITY_LIMIT = _reason("velocity_limit", "reaching a point needs more than the velocity limits allow")
ACCELERATION_LIMIT = _reason("acceleration_limit", "keeping to a point needs more than the acceleration limits allow")
SELF_COLLISION = _reason("self_collision", "two links of the robot come closer than self_clearance_m")
TABLE_COLLISION = _reason("table_collision", "a link comes closer to the table than clearance_m")
WORKSPACE_BOUNDS = _reason("workspace_bounds", "a link leaves the workspace box")
OBSTACLE_COLLISION = _reason("obstacle_collision", "a link comes closer to an obstacle than clearance_m")
STOPPING_DISTANCE = _reason("stopping_distance", "stopping after the last kept point would collide")

# ---- joint states (joint_state_check and the nodes) ---------------------------------------------------------
JOINT_STATE_UNSTAMPED = _reason("joint_state_unstamped", "header.stamp is 0")
JOINT_STATE_SIZE = _reason("joint_state_size", "not one position (or velocity) per name")
JOINT_STATE_DUPLICATE_NAME = _reason("joint_state_duplicate_name", "a joint name appears twice")
JOINT_STATE_MISSING_JOINT = _reason("joint_state_missing_joint", "none of the node's joints, or one never named yet")
JOINT_STATE_NON_FINITE = _reason("joint_state_non_finite", "NaN or infinite in a needed value")
JOINT_STATE_JUMP = _reason("joint_state_jump", "a position moved further than its velocity limit allows")
JOINT_STATE_BEFORE_RESET = _reason("joint_state_before_reset", "stamped before the current episode began")
JOINT_STATE_UNTRUSTED_SOURCE = _reason("joint_state_untrusted_source", "from a publisher not trusted for joint states")
JOINT_STATE_CONFLICT = _reason("joint_state_conflict", "two publishers name the same joints")

# ---- the policy's inputs (token stream, instruction gate) ---------------------------------------------------
LATE = _reason("late", "stamped more than lateness_s before what the policy already read")
DUPLICATE = _reason("duplicate", "the same stamp, kind and source as an observation in the window")
UNKNOWN_CAMERA = _reason("unknown_camera", "a frame from a topic that is none of the model's cameras")
UNSUPPORTED_TYPE = _reason("unsupported_type", "a message type that is not an observation")
NO_TEXT_ENCODER = _reason("no_text_encoder", "an instruction for a stream without a text encoder")
INSTRUCTION_TOO_LONG = _reason("instruction_too_long", "an instruction longer than the bound (bytes or characters)")
INSTRUCTION_FLOOD = _reason("instruction_flood", "an instruction replaced by a newer one before it was encoded")

# ---- an instruction the policy cannot ground (``policy.grounding``): refused, the arm holds --------------------
INSTRUCTION_NEGATED = _reason("instruction_negated", "the instruction negates its request (not, don't, never, ...)")
INSTRUCTION_NO_TARGET = _reason("instruction_no_target", "the instruction names none of the targets the model knows")
INSTRUCTION_UNKNOWN_TARGET = _reason(
    "instruction_unknown_target", "the instruction names a target the scene does not have (a yellow cup)"
)
INSTRUCTION_MANY_TARGETS = _reason("instruction_many_targets", "the instruction asks for more than one target")
INSTRUCTION_NOT_GROUNDED = _reason(
    "instruction_not_grounded",
    "the instruction check's score is under its threshold: not a request the model was trained for",
)

# ---- why the policy decodes no chunk at a tick (its status and ``skipped.<code>``; also NO_JOINT_STATE,
# STALE_JOINT_STATE above) --------------------------------------------------------------------------------------
NO_INSTRUCTION = _reason("no_instruction", "no instruction in force")
INSTRUCTION_REFUSED = _reason("instruction_refused", "the newest instruction was refused: the arm holds")
NO_OBSERVATIONS = _reason("no_observations", "no observation yet")
NO_IMAGE = _reason("no_image", "no frame of a camera in the window")
STALE_IMAGE = _reason("stale_image", "a camera's newest frame is older than max_image_age_s")
FROZEN_CAMERA = _reason("frozen_camera", "a camera repeats one picture while the arm moves (frozen_camera_s)")
MODEL_INPUT_ERROR = _reason("model_input_error", "an observation the model cannot take")
NON_FINITE_OUTPUT = _reason("non_finite_output", "the model produced NaN or infinity")
TICK_ERROR = _reason("tick_error", "an unexpected error in the policy's tick")

# ---- what the filter did to a chunk it passed (findings, not refusals) -------------------------------------
PAST_POINTS = "past_points"  # points already in the past, dropped
POSITION_CLAMPED = "position_clamped"  # targets within the clamp tolerance past a limit, clamped onto it
TIME_SCALED = "time_scaled"  # times from now stretched to meet the velocity and acceleration limits

# ---- groups --------------------------------------------------------------------------------------------------
# The safety filter's, by kind: malformed chunks, inputs at the wrong time or missing, unsafe points.
CHUNK_MALFORMED = (
    EMPTY_CHUNK,
    SIZE_MISMATCH,
    TOO_MANY_POINTS,
    NON_FINITE,
    UNKNOWN_JOINT,
    MISSING_JOINT,
    DUPLICATE_JOINT,
    NEGATIVE_TIME,
    NON_INCREASING_TIME,
    HORIZON_TOO_LONG,
)
CHUNK_INPUT = (
    STALE_CHUNK,
    FUTURE_STAMP,
    UNSTAMPED,
    BEFORE_RESET,
    NO_ROBOT_MODEL,
    INVALID_CONFIGURATION,
    NO_JOINT_STATE,
    STALE_JOINT_STATE,
    JOINT_STATE_INCOMPLETE,
)
UNSAFE_POINT = (
    UNREACHABLE_FIRST_POINT,
    POSITION_LIMIT,
    VELOCITY_LIMIT,
    ACCELERATION_LIMIT,
    SELF_COLLISION,
    TABLE_COLLISION,
    WORKSPACE_BOUNDS,
    OBSTACLE_COLLISION,
    STOPPING_DISTANCE,
)
FILTER_REASONS = CHUNK_MALFORMED + CHUNK_INPUT + UNSAFE_POINT
# What JointStateCheck refuses, in the order it checks.
JOINT_STATE_CHECKS = (
    JOINT_STATE_UNSTAMPED,
    JOINT_STATE_SIZE,
    JOINT_STATE_DUPLICATE_NAME,
    JOINT_STATE_MISSING_JOINT,
    JOINT_STATE_NON_FINITE,
    JOINT_STATE_JUMP,
)
# The token stream's refusals for timing (a loaded machine or a reset causes them), not for what was sent.
TIMING = frozenset({BEFORE_RESET, FUTURE_STAMP, LATE, DUPLICATE})
# Counted, but no cause for a warning: the previous episode's messages, in flight at a reset.
EXPECTED_AT_RESET = frozenset({JOINT_STATE_BEFORE_RESET})
