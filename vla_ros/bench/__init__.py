"""Benchmarks behind ``vla-ros bench <part>``: fixed seed, warm-up, p50/p99, JSON as the last line."""
