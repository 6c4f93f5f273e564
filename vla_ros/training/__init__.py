"""Training the policy from MCAP demonstrations (torch, no rclpy)."""
