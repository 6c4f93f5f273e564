"""Bags: rosbag2-compatible MCAP files and folders, and replaying them into training samples."""
