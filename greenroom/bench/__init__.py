"""Benchmarks shipped with greenroom (``greenroom bench ...``); each compares against
baselines measured in the same run, so the ratios survive a noisy machine."""

from types import ModuleType

from . import graph, log

SUITES: dict[str, ModuleType] = {"graph": graph, "log": log}
