"""Where a chunk puts the tool: a loss in metres beside the loss in joint units (``vla-ros train --tool-loss W``).

The action loss weighs every joint's error alike, in normalised units. The hand does not: on the sim arm
0.03 rad at the shoulder moves the tool about 1.5 cm, the same error at the wrist roll a millimetre, and
the grasps miss by one to three centimetres. This term runs each predicted and each target chunk point
through the robot's forward kinematics (its URDF, in torch, so the gradient reaches the network) and
compares four points fixed to the tool: its origin and one ``span_m`` along each of its axes, which pin
position and orientation. The mean squared distance, in units of ``scale_m``, is added to the loss with
the given weight. Training only: the model, its chunks and its exports are unchanged.

No rclpy and no Pinocchio: the URDF is read with the same parser as the joint limits (``urdf_limits``).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from vla_ros.urdf_limits import MOVABLE_TYPES, robot_root


def _floats(text: str | None, default: tuple[float, float, float]) -> np.ndarray:
    return np.array([float(v) for v in text.split()], dtype=np.float64) if text else np.array(default, dtype=np.float64)


def _rpy_matrix(rpy: np.ndarray) -> np.ndarray:
    """URDF's fixed-axis roll, pitch, yaw: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    (cr, cp, cy), (sr, sp, sy) = np.cos(rpy), np.sin(rpy)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def _skew(axis: np.ndarray) -> np.ndarray:
    x, y, z = axis
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def kinematic_chain(urdf: str | Path | ET.Element, tool_link: str) -> list[dict]:
    """The joints from the root link down to ``tool_link``, root first: name, type, origin (xyz, rotation)
    and unit axis of each. Raises ValueError for a link that is not there, or a chain with a mimic joint, a
    joint of another type or a movable joint without a usable axis."""
    root, where, _ = robot_root(urdf)
    by_child = {j.find("child").get("link"): j for j in root.iter("joint") if j.find("child") is not None}
    links = {link.get("name") for link in root.iter("link")}
    if tool_link not in links:
        raise ValueError(f"tool link {tool_link!r} is not in {where}; it has {sorted(n for n in links if n)}")
    chain, link = [], tool_link
    while link in by_child:
        joint = by_child[link]
        kind = joint.get("type")
        if kind != "fixed" and kind not in MOVABLE_TYPES:
            raise ValueError(
                f"joint {joint.get('name')!r} in {where} is {kind!r}: only fixed, revolute, continuous and "
                "prismatic joints can lie between the root and the tool"
            )
        if joint.find("mimic") is not None:
            raise ValueError(
                f"joint {joint.get('name')!r} in {where} mimics another; a mimic joint between the root "
                "and the tool is not supported"
            )
        origin = joint.find("origin")
        axis = _floats(joint.find("axis").get("xyz") if joint.find("axis") is not None else None, (1.0, 0.0, 0.0))
        if kind != "fixed" and not (axis.shape == (3,) and np.isfinite(axis).all() and np.linalg.norm(axis) > 0):
            raise ValueError(
                f"joint {joint.get('name')!r} in {where} has axis {axis.tolist()}: it needs three finite "
                "numbers, not all zero"
            )
        chain.append(
            {
                "name": joint.get("name"),
                "type": kind,
                "xyz": _floats(origin.get("xyz") if origin is not None else None, (0.0, 0.0, 0.0)),
                "rotation": _rpy_matrix(_floats(origin.get("rpy") if origin is not None else None, (0.0, 0.0, 0.0))),
                "axis": axis / np.linalg.norm(axis) if kind != "fixed" else axis,
            }
        )
        link = joint.find("parent").get("link")
        if len(chain) > len(by_child):
            raise ValueError(f"{where} has a loop above {tool_link!r}")
    return chain[::-1]


class ToolPoints(torch.nn.Module):
    """Forward kinematics of the tool for joint vectors in the model's column order.

    ``joint_names``: the action columns (extra columns, such as a gripper that is not on the chain, are
    ignored); every movable joint between the root and ``tool_link`` must be among them.
    ``points(q)`` (N, len(joint_names)) -> (N, 4, 3) metres in the root frame; ``forward(pred, target)``
    -> ``weight`` x mean squared distance of the four points in units of ``scale_m``.
    """

    def __init__(
        self,
        urdf: str | Path | ET.Element,
        joint_names: Sequence[str],
        tool_link: str,
        weight: float = 1.0,
        span_m: float = 0.05,
        scale_m: float = 0.05,
    ) -> None:
        super().__init__()
        if not (math.isfinite(weight) and weight > 0 and span_m > 0 and scale_m > 0):
            raise ValueError(f"tool loss weight ({weight}), span_m ({span_m}) and scale_m ({scale_m}) must be > 0")
        chain = kinematic_chain(urdf, tool_link)
        columns = {name: i for i, name in enumerate(joint_names)}
        self.kinds, self.columns = [], []
        for joint in chain:
            if joint["type"] == "fixed":
                self.kinds.append("fixed")
                self.columns.append(-1)
                continue
            if joint["name"] not in columns:
                raise ValueError(
                    f"joint {joint['name']!r} moves the tool link {tool_link!r} but is not one of the "
                    f"model's joints {list(joint_names)}"
                )
            self.kinds.append("prismatic" if joint["type"] == "prismatic" else "revolute")
            self.columns.append(columns[joint["name"]])
        if all(c < 0 for c in self.columns):
            raise ValueError(f"no joint of the model moves the tool link {tool_link!r}")
        as_tensor = lambda rows: torch.tensor(np.stack(rows), dtype=torch.float32)  # noqa: E731
        self.register_buffer("xyz", as_tensor([j["xyz"] for j in chain]), persistent=False)
        self.register_buffer("rotation", as_tensor([j["rotation"] for j in chain]), persistent=False)
        self.register_buffer("axis", as_tensor([j["axis"] for j in chain]), persistent=False)
        self.register_buffer("skew", as_tensor([_skew(j["axis"]) for j in chain]), persistent=False)
        offsets = np.vstack([np.zeros(3), span_m * np.eye(3)])  # the tool's origin and one point on each axis
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.float32), persistent=False)
        self.weight, self.scale_m = float(weight), float(scale_m)

    def points(self, q: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(3, dtype=q.dtype, device=q.device)
        rot, pos = eye.expand(q.shape[0], 3, 3), q.new_zeros(q.shape[0], 3)
        for i, (kind, col) in enumerate(zip(self.kinds, self.columns)):
            pos = pos + rot @ self.xyz[i]
            rot = rot @ self.rotation[i]
            if kind == "revolute":  # Rodrigues: I + sin(q) K + (1 - cos(q)) K^2
                angle = q[:, col, None, None]
                k = self.skew[i]
                rot = rot @ (eye + torch.sin(angle) * k + (1.0 - torch.cos(angle)) * (k @ k))
            elif kind == "prismatic":
                pos = pos + q[:, col, None] * (rot @ self.axis[i])
        return pos[:, None, :] + self.offsets @ rot.transpose(1, 2)

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        err = (self.points(pred) - self.points(target)) / self.scale_m
        return self.weight * err.pow(2).sum(-1).mean()
