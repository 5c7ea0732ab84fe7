"""Agent traffic as load: ``greenroom load`` and its library API.

A :class:`Workload` says what one virtual user's session looks like (turns, lengths in
tokens from :class:`Dist` s, think time, :class:`SyntheticTool` s it really runs, a shared
system prompt); :data:`PRESETS` names a few. A :class:`LoadPlan` says how sessions arrive
(a closed loop of N, or an open loop at a rate: Poisson, bursty or uniform, with a
ramp-up) and when the run ends. :func:`run_load` runs it against any ``ChatModel`` —
streamed calls, each timed from the instant it was due — and returns the report: TTFT,
ITL, TPOT and end-to-end percentiles, goodput under a :class:`Slo`, offered and achieved
rates, and the generator's own CPU, send lag and event-loop lag; an open loop that the
server cannot keep up with stops early, saying so. :func:`sweep_rate` finds the highest
rate that meets an SLO.
"""

from ._dist import Dist
from ._measure import RequestRecord, SessionRecord, Slo, quantiles
from ._run import LoadPlan, run_load, sweep_rate
from ._workload import PRESETS, SyntheticTool, Workload, load_workload, workload_from

__all__ = [
    "PRESETS",
    "Dist",
    "LoadPlan",
    "RequestRecord",
    "SessionRecord",
    "Slo",
    "SyntheticTool",
    "Workload",
    "load_workload",
    "quantiles",
    "run_load",
    "sweep_rate",
    "workload_from",
]
