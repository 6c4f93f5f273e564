"""Test-wide settings: DDS on loopback in its own domain, headless rendering, offline models."""

import os

# Never let discovery leave this machine (ROS_LOCALHOST_ONLY for Humble); own domain unless CI set one.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", "61")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["PYTHONUNBUFFERED"] = "1"
