"""Shared ROS 2 plumbing for the node shells: parameter tables, diagnostics, message conversions, main()."""
