"""Benchmarks (not timed tests): per-turn cost against thread length.

`python -m bench` (full) or `python -m bench --quick`. Every figure is reported with a ratio
against a baseline measured in the same run (the raw-driver floor, the shortest thread), since
absolute times on a shared machine mean little. See bench/README.md.
"""
