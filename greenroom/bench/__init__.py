"""Benchmarks shipped with greenroom (``greenroom bench ...``); each compares against
baselines measured in the same run, so the ratios survive a noisy machine."""
