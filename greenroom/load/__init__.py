"""Agent traffic as load: ``greenroom load`` and its library API.

A :class:`Workload` says what one virtual user's session looks like (turns, lengths in
tokens from :class:`Dist` s, think time, :class:`SyntheticTool` s it really runs, a shared
system prompt); :data:`PRESETS` names a few. A :class:`LoadPlan` says how sessions arrive
(a closed loop of N, or an open loop at a rate: Poisson, bursty or uniform, with a
ramp-up) and when the run ends. :func:`run_load` runs it against any ``ChatModel`` —
streamed calls, each timed from the instant it was due — and returns a :class:`LoadReport`: TTFT,
ITL, TPOT and end-to-end percentiles, goodput under a :class:`Slo`, offered and achieved
rates, and the generator's own CPU, send lag and event-loop lag; an open loop that the
server cannot keep up with stops early, saying so. :func:`sweep_rate` finds the highest
rate that meets an SLO.

Spread over this machine's cores: :func:`run_in_processes` runs a :class:`Job` per
:class:`Share` of the schedule, each in its own process (``greenroom load --processes``).

Spread over daemons: :func:`fleet_tasks` makes a run's sessions tasks of type ``load`` for
the shared graph, a daemon's pool of :class:`LoadAgent` s runs them (each request's record
written to the store as it ends), and :func:`fleet_report` builds one report from every
daemon's records.
"""

from ._dist import Dist
from ._fleet import LoadAgent, LoadTarget, fleet_report, fleet_tasks
from ._measure import LoadReport, RequestRecord, SessionRecord, Slo, Spread, quantiles, report_from
from ._processes import Job, ProcessFigures, Target, run_in_processes
from ._records import LoadEntry, LoadRecordStore, check_run
from ._run import LoadPlan, Share, run_load, sweep_rate
from ._workload import PRESETS, SyntheticTool, Workload, load_workload, workload_from

__all__ = [
    "PRESETS",
    "Dist",
    "Job",
    "LoadAgent",
    "LoadEntry",
    "LoadPlan",
    "LoadRecordStore",
    "LoadReport",
    "LoadTarget",
    "ProcessFigures",
    "RequestRecord",
    "SessionRecord",
    "Share",
    "Slo",
    "Spread",
    "SyntheticTool",
    "Target",
    "Workload",
    "check_run",
    "fleet_report",
    "fleet_tasks",
    "load_workload",
    "quantiles",
    "report_from",
    "run_in_processes",
    "run_load",
    "sweep_rate",
    "workload_from",
]
