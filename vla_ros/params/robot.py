"""Which robot a node works for: the ``robot_profile`` parameter every node declares alike, and how it fills in the
robot description files where they are not given one by one. No rclpy import."""

from __future__ import annotations

import dataclasses

from vla_ros.params.spec import ParamSpec
from vla_ros.robot_profile import ProfileError, RobotProfile, load_profile

ROBOT_PROFILE = ParamSpec(
    "robot_profile",
    "",
    "robot profile: a YAML file or a name looked up in $VLA_ROS_ROBOT_PATH and the package (docs/your_robot.md); "
    "it gives the URDF, SRDF, package paths and joints wherever the node's own parameters for them are empty",
    read_only=True,
)


@dataclasses.dataclass(frozen=True)
class RobotFiles:
    """The description a node loads: explicit parameters first, then the profile; "" = not given."""

    urdf: str
    srdf: str
    package_paths: tuple[str, ...]
    profile: RobotProfile | None

    @property
    def joints(self) -> tuple[str, ...]:
        """The profile's commanded joints; empty without a profile."""
        return self.profile.commanded_joints if self.profile else ()


def robot_files(p: dict) -> RobotFiles:
    """The robot files from a node's parameters (``robot_profile``, and where declared ``robot_description_file``,
    ``srdf_file``, ``package_paths``). Raises ValueError naming the profile's problem."""
    profile = None
    if str(p.get("robot_profile", "")).strip():
        try:
            profile = load_profile(p["robot_profile"])
        except ProfileError as err:
            raise ValueError(f"robot_profile: {err}") from None
    paths = tuple(x.strip() for x in p.get("package_paths", ()) if x.strip())
    urdf = str(p.get("robot_description_file", "") or "")
    srdf = str(p.get("srdf_file", "") or "")
    if profile is not None:
        urdf = urdf or str(profile.urdf)
        srdf = srdf or (str(profile.srdf) if profile.srdf else "")
        paths = paths or profile.package_paths
    return RobotFiles(urdf, srdf, paths, profile)
