"""The joint limits' parameters, declared once for the safety filter and the controller. No rclpy import.

``velocity_scale``, ``acceleration_scale``, ``default_acceleration_rad_s2``, ``default_acceleration_m_s2`` and
``limit_overrides`` tighten the URDF's limits (``vla_ros.joint_limits``). Both nodes declare these same specs
and read them from one file, ``config/limits.yaml`` (its ``/**`` section reaches every node given it); the
policy's chunk shaping reads that file too (its ``limits_file`` parameter). Each node may still tighten its own
copy at run time.
"""

from __future__ import annotations

import math

from vla_ros.joint_limits import ConfigError, LimitOverride
from vla_ros.params.spec import ParamSpec
from vla_ros.params.tightening import LOWER

LIMITS_FILE = "limits.yaml"  # under the package's config/


def lines(value) -> tuple[str, ...]:
    """String-array parameters default to [''] (an empty list has no type in ROS 2): blanks are ignored."""
    return tuple(v.strip() for v in value if v.strip())


def check_lines(parse, indexed: bool = False):
    """A ``ParamSpec.check`` parsing each line with ``parse(line)`` (``parse(line, index)`` when ``indexed``);
    the reason is the first ConfigError."""

    def check(value) -> str | None:
        for i, line in enumerate(lines(value)):
            try:
                parse(line, i) if indexed else parse(line)
            except ConfigError as err:
                return str(err)
        return None

    return check


# ---- limit_overrides may only tighten at run time ---------------------------------------------------------
def _effective_overrides(values, robot) -> dict[tuple[str, str], float]:
    """(joint, key) -> the limit limit_overrides sets for it, with the URDF's value where it sets none
    (unknown without a robot: +-inf) and the default acceleration where it gives none."""
    try:
        overrides = {o.joint: o for o in (LimitOverride.parse(line) for line in lines(values["limit_overrides"]))}
    except ConfigError:
        return {}
    joints = list(robot.joint_names) if robot is not None else list(overrides)
    out = {}
    for j in joints:
        o = overrides.get(j)
        if robot is not None and j in robot.joint_names:
            i = list(robot.joint_names).index(j)
            urdf = {
                "lower": float(robot.lower[i]),
                "upper": float(robot.upper[i]),
                "velocity": float(robot.velocity[i]),
            }
            accel = values["default_acceleration_m_s2"] if robot.prismatic[i] else values["default_acceleration_rad_s2"]
        else:  # conservative: the URDF could allow anything, the default could be the larger one
            urdf = {"lower": -math.inf, "upper": math.inf, "velocity": math.inf}
            accel = max(values["default_acceleration_m_s2"], values["default_acceleration_rad_s2"])
        out[(j, "lower")] = max(urdf["lower"], o.lower) if o and o.lower is not None else urdf["lower"]
        out[(j, "upper")] = min(urdf["upper"], o.upper) if o and o.upper is not None else urdf["upper"]
        out[(j, "velocity")] = min(urdf["velocity"], o.velocity) if o and o.velocity is not None else urdf["velocity"]
        out[(j, "acceleration")] = o.acceleration if o and o.acceleration is not None else accel
    return out


def overrides_rule(robot=None):
    """The tightening rule of limit_overrides: no joint's effective limit may move out. ``robot`` (anything
    with ``joint_names``, ``lower``, ``upper``, ``velocity``, ``prismatic``; None until known) lets the
    overrides be compared with the URDF's limits instead of conservatively."""

    def rule(old, new, old_values, new_values) -> str | None:
        before, after = _effective_overrides(old_values, robot), _effective_overrides(new_values, robot)
        looser = []
        for (joint, key), was in before.items():
            now = after.get((joint, key))
            if now is None and robot is None:
                now = {"lower": -math.inf, "upper": math.inf}.get(key, math.inf)
            if now is None:
                continue
            if (now < was) if key == "lower" else (now > was):
                looser.append(f"{joint} {key} {was:g} -> {now:g}")
        return f"limit_overrides: loosens {', '.join(looser)}" if looser else None

    return rule


_SCALE = "below 1 % of the limits the arm barely moves (to stop it, use the controller's ~/enable)"


def _scale(name: str, of: str) -> ParamSpec:
    return ParamSpec(
        name,
        1.0,
        f"fraction [0.01, 1] of {of} (config/limits.yaml: the filter, the controller and the policy's chunk "
        "shaping read the same)",
        min_value=0.01,
        max_value=1.0,
        min_reason=_SCALE,
        field=True,
        tighten=LOWER,
    )


PARAMS = [
    _scale("velocity_scale", "the URDF velocity limits"),
    _scale("acceleration_scale", "the acceleration limits"),
    ParamSpec(
        "default_acceleration_rad_s2",
        10.0,
        "revolute joints' acceleration limit where limit_overrides gives none (config/limits.yaml)",
        min_value=0.01,
        max_value=1000.0,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "default_acceleration_m_s2",
        1.0,
        "prismatic joints' acceleration limit where limit_overrides gives none (config/limits.yaml)",
        min_value=0.001,
        max_value=100.0,
        field=True,
        tighten=LOWER,
    ),
    ParamSpec(
        "limit_overrides",
        [""],
        "tighter limits per joint: 'joint: lower=.. upper=.. velocity=.. acceleration=..' (never looser than the URDF; "
        "config/limits.yaml)",
        check=check_lines(LimitOverride.parse),
        field=True,
        to_field=lines,
        tighten=overrides_rule(None),
    ),
]
