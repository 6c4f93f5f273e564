"""Closed-loop evaluation in the MuJoCo sim through the same cores the nodes run."""
