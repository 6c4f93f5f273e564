"""Command-line tools behind ``vla-ros`` verbs (demo, parameter docs)."""
