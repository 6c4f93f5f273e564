"""Thin rclpy node shells. Each converts messages to arrays, calls a ROS-free core, and publishes."""
