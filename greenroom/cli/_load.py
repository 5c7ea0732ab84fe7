"""What ``greenroom load`` runs (imported only by that command)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import GreenroomError, InvalidInput

if TYPE_CHECKING:
    from ..load import LoadReport, Spread


def run_command(args: argparse.Namespace) -> int:
    from ..load import LoadPlan, run_load
    from ..load._replay import read_trace, replay

    if args.compare is not None:
        return _compare(args)
    if args.sweep is not None:
        return _sweep(args)
    replaying = args.replay is not None or args.replay_journal
    if args.replay is not None and args.replay_journal:
        raise InvalidInput("give --replay TRACE or --replay-journal, not both", field="--replay")
    if not replaying and args.concurrency is None and args.rate is None:
        raise InvalidInput(
            "give --concurrency N (a closed loop) or --rate R (an open loop)", field="--concurrency"
        )
    if not replaying and args.sessions is None and args.duration is None:
        raise InvalidInput("give --sessions N or --duration S (when the run ends)", field="--sessions")
    workload, slo = _workload(args), _slo(args)
    plan = LoadPlan(
        concurrency=args.concurrency, rate=args.rate, pattern=args.pattern, ramp_up=args.ramp_up,
        sessions=args.sessions, duration=args.duration, seed=args.seed, slo=slo,
    )  # fmt: skip
    if not replaying:
        try:
            plan.check()
        except InvalidInput as error:  # the plan's field, as the flag that set it
            raise InvalidInput(
                str(error), field="--" + error.field.replace("_", "-"), value=error.value
            ) from None
    if args.on_daemons:
        if replaying:
            raise InvalidInput("--on-daemons runs a workload, not a replay", field="--on-daemons")
        return _on_daemons(args, workload, plan)
    model = _model(args)
    live = not args.quiet and sys.stderr.isatty()
    records: list[Any] = []
    processes = _processes(args, plan, replaying)
    if processes > 1:
        return _in_processes(args, processes, workload, plan, slo, live)

    def show(f: dict[str, Any]) -> None:
        ttft = f["ttft_p50_ms"]
        print(
            f"\r[{f['elapsed_s']:7.1f}s] sessions {f['sessions_done']}/{f['sessions_started']}"
            f" · requests {f['requests']} ({f['in_flight']} in flight) · errors {f['errors']}"
            + (f" · ttft p50 {ttft:.0f} ms" if ttft is not None else ""),
            end="", file=sys.stderr, flush=True,
        )  # fmt: skip

    async def main() -> LoadReport:
        async with model:
            if args.replay is not None:
                return await replay(
                    model, read_trace(args.replay), speed=args.speed, slo=slo, records=records
                )
            if args.replay_journal:
                recording = await _journals(args)
                return await replay(model, recording, speed=args.speed, slo=slo, records=records)
            return await run_load(model, workload, plan, progress=show if live else None, records=records)

    report = anyio.run(main, backend=args.backend)
    if live:
        print(file=sys.stderr)
    return _show(args, report, records)


def _processes(args: argparse.Namespace, plan: Any, replaying: bool) -> int:
    """How many generator processes: ``--processes`` (default: the machine's cores), never
    more than the run has users or sessions to share."""
    wanted = args.processes if args.processes is not None else (os.cpu_count() or 1)
    if replaying:
        return int(wanted)
    bounds = [wanted]
    if plan.concurrency is not None:
        bounds.append(plan.concurrency)
    if plan.sessions is not None:
        bounds.append(plan.sessions)
    return int(min(bounds))


def _target(args: argparse.Namespace) -> Any:
    from ..load import Target

    base_url, name = _server(args)
    return Target(base_url, name, args.client, args.timeout, keep_alive=args.concurrency or 10_000)


def _in_processes(
    args: argparse.Namespace, processes: int, workload: Any, plan: Any, slo: Any, live: bool
) -> int:
    """The run's schedule split over ``processes`` generator processes; one report."""
    from ..load import Job, Share, run_in_processes
    from ..load._replay import read_trace

    target = _target(args)

    def progress(done: int) -> None:
        print(f"\r[{processes} processes] requests {done}", end="", file=sys.stderr, flush=True)

    async def main() -> tuple[LoadReport, list[Any], Any]:
        recording = None
        if args.replay is not None:
            recording = read_trace(args.replay)
        elif args.replay_journal:
            recording = await _journals(args)
        if recording is not None:
            parts = min(processes, len(recording))
            jobs = [
                Job(target, Share(part, parts), args.backend, recording=recording, speed=args.speed, slo=slo)
                for part in range(parts)
            ]
        else:
            jobs = [
                Job(target, Share(part, processes), args.backend, plan=plan, workload=workload)
                for part in range(processes)
            ]
        return await run_in_processes(jobs, progress=progress if live else None)

    report, records, _ = anyio.run(main, backend=args.backend)
    if live:
        print(file=sys.stderr)
    return _show(args, report, records)


def _show(args: argparse.Namespace, report: LoadReport, records: list[Any]) -> int:
    if args.csv:
        _write_csv(args.csv, records)
    if args.html:
        from ..load._html import html_report

        _write(args.html, html_report(report, records))
    if args.json:
        import msgspec

        print(msgspec.json.encode(report).decode())
    else:
        print(format_report(report))
    failed = failure(report, _where(args))
    if failed is not None:
        raise LoadFailed(failed)
    return 0


class LoadFailed(GreenroomError):
    """The run measured nothing: the server was never reached, or every request failed
    (the report is printed first; the command exits 1)."""


def failure(report: LoadReport, where: str) -> str | None:
    """Why a run that measured nothing failed (``None`` when some request succeeded):
    the address and what happened when nothing ever reached it, else the kinds of error."""
    requests = report.requests
    if not requests or report.errors < requests:
        return None
    examples = report.error_examples
    said = "; ".join(
        f"{kind} in {count} request(s)" + (f", e.g. {examples[kind]}" if kind in examples else "")
        for kind, count in sorted(report.errors_by_kind.items(), key=lambda item: -item[1])
    )
    if report.unreached:
        return f"could not reach the server at {where}: {said}"
    return f"every request of the run failed ({requests}): {said}"


def _where(args: argparse.Namespace) -> str:
    from ..llm import BASE_URL_ENV

    return str(args.base_url or os.environ.get(BASE_URL_ENV) or "the server")


def _compare(args: argparse.Namespace) -> int:
    """``--compare A.json B.json ... --html FILE``: one page of several runs."""
    from ..load import report_from
    from ..load._html import comparison_report

    if not args.html:
        raise InvalidInput("--compare draws a page: give --html FILE", field="--html")
    reports = []
    for name in args.compare:
        try:
            with open(name, "rb") as source:
                document = json.load(source)
        except (OSError, ValueError) as error:
            raise InvalidInput(
                f"--compare: cannot read {name!r}: {error}", field="--compare", value=name
            ) from None
        reports.append(report_from(document, name))  # a report an older greenroom wrote reads too
    _write(args.html, comparison_report(reports, args.compare))
    print(f"wrote {args.html}: {len(reports)} runs compared")
    return 0


def _on_daemons(args: argparse.Namespace, workload: Any, plan: Any) -> int:
    """``--on-daemons``: the plan's sessions as ``load`` tasks for the daemons of the data
    dir / ``--store``; wait until every one is final; one report of every daemon's records."""
    import secrets
    import time

    from ..load import LoadRecordStore, LoadTarget, check_run, fleet_report, fleet_tasks
    from ..load._fleet import AGENT_TYPE
    from . import _operate

    if args.sessions is None:
        raise InvalidInput("--on-daemons needs --sessions N (how many tasks to submit)", field="--sessions")
    if args.sweep is not None:
        raise InvalidInput("--on-daemons does not sweep; give --rate or --concurrency", field="--sweep")
    base_url, name = _server(args)
    _model(args)  # the server's address checked here, before anything is submitted
    run = args.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    try:
        check_run(run)
    except InvalidInput as error:
        raise InvalidInput(str(error), field="--run", value=run) from None
    target = LoadTarget(base_url, name, client=args.client, timeout=args.timeout)
    live = not args.quiet and sys.stderr.isatty()

    async def main() -> tuple[LoadReport, list[Any]]:
        where = await _operate.locate(args.data_dir, None, None, args.store)
        started = time.time() + 1.0  # the first session is due once every task is submitted
        tasks = fleet_tasks(run, workload, plan, target, start=started)
        ids = {task.id for task in tasks}
        await _operate.add_tasks(where, tasks)
        async with where.backend() as store:
            records = LoadRecordStore(store.records())
            try:
                while True:
                    live_tasks = await _operate.list_tasks(where, None, AGENT_TYPE)
                    open_ = [t for t in live_tasks if t.id in ids and not t.status.final]
                    if live:
                        done = await records.count(run, "s/")
                        print(f"\r[{time.time() - started:7.1f}s] run {run}: sessions {done}/{len(ids)} "
                              f"· tasks open {len(open_)}", end="", file=sys.stderr, flush=True)  # fmt: skip
                    if not open_:
                        break
                    await anyio.sleep(0.5)
                failed = [t for t in live_tasks if t.id in ids and t.status.value != "COMPLETED"]
                report, requests = await fleet_report(
                    records, run, plan=plan, workload=workload, duration=time.time() - started
                )
            finally:
                await records.aclose()
        report.tasks_failed = len(failed)
        return report, requests

    report, requests = anyio.run(main, backend=args.backend)
    if live:
        print(file=sys.stderr)
    return _show(args, report, requests)


def _server(args: argparse.Namespace) -> tuple[str, str]:
    from ..llm import BASE_URL_ENV, MODEL_ENV

    base_url = args.base_url or os.environ.get(BASE_URL_ENV)
    if not base_url:
        raise InvalidInput(f"give --base-url (or set {BASE_URL_ENV}): the server to load", field="--base-url")
    name = args.model_name or os.environ.get(MODEL_ENV)
    if not name:
        raise InvalidInput(f"give --model (or set {MODEL_ENV}): the model to ask", field="--model")
    return base_url, name


def _model(args: argparse.Namespace) -> Any:
    """The model under load, from ``--base-url`` / ``--model`` (or the environment)."""
    from ..llm import OpenAIChatModel

    base_url, name = _server(args)
    try:
        return OpenAIChatModel(
            name, base_url=base_url, client=args.client, timeout=args.timeout, max_retries=0,
            keep_alive=args.concurrency or 10_000,  # a connection per user in flight, kept between turns
            fallbacks=False,  # measured as the server behaves: a cut stream is an error, never a fallback
        )  # fmt: skip
    except ValueError as error:
        raise InvalidInput(str(error), field="--base-url", value=base_url) from None


def _workload(args: argparse.Namespace) -> Any:
    from ..load import PRESETS, load_workload

    if args.preset is not None and args.preset not in PRESETS:
        raise InvalidInput(
            f"--preset must be one of {', '.join(PRESETS)}, got {args.preset!r}",
            field="--preset",
            value=args.preset,
        )
    return load_workload(args.workload) if args.workload else PRESETS[args.preset or "chat"]


def _slo(args: argparse.Namespace) -> Any:
    from ..load import Slo

    return Slo(
        None if args.slo_ttft_ms is None else args.slo_ttft_ms / 1000,
        None if args.slo_itl_ms is None else args.slo_itl_ms / 1000,
        args.slo_session_s,
    )


def _sweep(args: argparse.Namespace) -> int:
    """``--sweep LOW:HIGH``: the highest rate meeting the objectives."""
    from ..load import sweep_rate

    if args.slo_ttft_ms is None and args.slo_itl_ms is None and args.slo_session_s is None:
        wanted = "--sweep needs an objective: --slo-ttft-ms, --slo-itl-ms or --slo-session-s"
        raise InvalidInput(wanted, field="--sweep")
    workload, slo, model = _workload(args), _slo(args), _model(args)
    low, high = args.sweep
    processes = args.processes if args.processes is not None else (os.cpu_count() or 1)
    run_step = None
    if processes > 1:
        from ..load import Job, Share, run_in_processes

        target = _target(args)

        async def run_step(plan: Any) -> tuple[LoadReport, list[Any]]:  # each step split too
            jobs = [
                Job(target, Share(part, processes), args.backend, plan=plan, workload=workload)
                for part in range(processes)
            ]
            report, records, _ = await run_in_processes(jobs)
            return report, records

    async def main() -> dict[str, Any]:
        async with model:
            return await sweep_rate(
                model, workload, slo, low=low, high=high, step_duration=args.step_duration,
                seed=args.seed, run_step=run_step,
            )  # fmt: skip

    found = anyio.run(main, backend=args.backend)
    last: LoadReport | None = found.get("last")
    if last is not None and last.unreached:  # nothing measured at all: not a sweep's answer
        raise LoadFailed(failure(last, _where(args)) or "the server was never reached")
    if args.html:
        from ..load._html import html_report

        _write(args.html, html_report(found["last"], found["records"], sweep=found))
    found.pop("records", None)
    found.pop("last", None)
    if args.json:
        print(json.dumps(found))
        return 0
    for step in found["steps"]:
        verdict = "meets" if step["passed"] else "misses"
        line = (
            f"  {step['rate']:10.3f} sessions/s: {verdict} the objectives ({step['attainment'] * 100:.1f} %)"
        )
        print(line + (f"; {step['stopped']}" if step["stopped"] else ""))
    rate = found["rate"]
    if rate is None:
        print(f"sweep: even {low:g} sessions/s misses the objectives")
    else:
        print(f"sweep: the highest rate meeting the objectives is {rate:g} sessions/s")
    return 0


async def _journals(args: argparse.Namespace) -> Any:
    """The recording the step journals of ``--data-dir`` / ``--store`` hold (every task's,
    live and archived)."""
    from ..daemon._backend import choose_store
    from ..load._replay import recording_from_steps

    async with choose_store(args.store, args.data_dir) as store:
        tasks = [*await store.read_tasks(None, None), *await store.read_tasks(None, None, archived=True)]
        journal = store.step_store()
        try:
            found = await journal.read_many([task.id for task in tasks])
        finally:
            await journal.aclose()
    recording = recording_from_steps(step for steps in found.values() for step in steps)
    if not recording:
        where = args.store or args.data_dir or "the default data dir"
        raise InvalidInput(f"--replay-journal: no recorded model call in {where}", field="--replay-journal")
    return recording


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as out:
            out.write(text)
    except OSError as error:
        raise InvalidInput(f"cannot write {path!r}: {error}", field="--html", value=path) from None


def _write_csv(path: str, records: list[Any]) -> None:
    start = min((r.scheduled for r in records), default=0.0)
    with open(path, "w", newline="") as out:
        rows = csv.writer(out)
        rows.writerow(["session", "turn", "scheduled_s", "send_lag_ms", "ttft_ms", "e2e_ms", "tokens_in",
                       "tokens_out", "itl_mean_ms", "itl_max_ms", "tool_calls", "error"])  # fmt: skip
        for r in records:
            ttft = "" if r.ttft is None else f"{r.ttft * 1000:.3f}"
            itl_mean = f"{sum(r.itl) / len(r.itl) * 1000:.3f}" if r.itl else ""
            itl_max = f"{max(r.itl) * 1000:.3f}" if r.itl else ""
            lag = f"{(r.sent - r.scheduled) * 1000:.3f}"
            rows.writerow([
                r.session, r.turn, f"{r.scheduled - start:.6f}", lag, ttft, f"{r.e2e * 1000:.3f}",
                r.tokens_in, r.tokens_out, itl_mean, itl_max, r.tool_calls, r.error or "",
            ])  # fmt: skip


def format_report(report: LoadReport) -> str:
    def row(name: str, figures: Spread, unit: str = "ms") -> str:
        if figures.p50 is None:
            return f"  {name:<8} -"
        return (
            f"  {name:<8} p50 {figures.p50:9.1f}  p90 {figures.p90 or 0:9.1f}  p99 {figures.p99 or 0:9.1f}"
            f"  mean {figures.mean or 0:9.1f} {unit}"
        )

    r = report
    lines = [
        f"load: {r.workload} · {r.sessions} sessions ({r.sessions_ok} ok) · "
        f"{r.requests} requests ({r.errors} errors) in {r.duration_s:.1f}s",
        row("ttft", r.ttft_ms),
        row("itl", r.itl_ms),
        row("tpot", r.tpot_ms),
        row("e2e", r.e2e_ms),
        f"  sessions/s offered {r.offered_rate or '-'} · achieved {r.achieved_rate:.2f} · "
        f"goodput {r.goodput:.2f} requests/s · output {r.output_tokens_per_s:.0f} tokens/s",
        f"  tools {r.tool_calls} calls ({r.time_in_tools_s:.1f}s) · client CPU "
        f"{r.client_cpu_s:.2f}s ({r.client_cpu_per_request_ms:.2f} ms/request)",
        f"  send lag p99 {r.send_lag_ms.p99 or 0:.1f} ms · loop lag p99 {r.loop_lag_ms.p99 or 0:.1f} ms",
    ]
    if r.daemons:
        lines.append(
            f"  run {r.run} on {len(r.daemons)} daemon(s): "
            + ", ".join(f"{name} {n} sessions" for name, n in sorted(r.daemons.items()))
            + (f"; {r.tasks_failed} task(s) failed" if r.tasks_failed else "")
        )
    if r.generator_processes > 1:
        lines.append(
            f"  generated by {r.generator_processes} processes (the percentiles are of every request):"
        )
        for one in r.processes:
            if one.get("died"):
                lines.append(f"    process {one['part']} (pid {one.get('pid')}): died, {one['died']}")
                continue
            lines.append(
                f"    process {one['part']} (pid {one.get('pid')}): {one['requests']} requests · CPU "
                f"{one.get('cpu_s') or 0:.2f}s ({one.get('cpu_per_request_ms') or 0:.2f} ms/request) · "
                f"send lag p99 {one.get('send_lag_p99_ms') or 0:.1f} ms · loop lag p99 "
                f"{one.get('loop_lag_p99_ms') or 0:.1f} ms"
            )
    if r.stopped:
        lines.append(f"  stopped early: {r.stopped}")
    if r.errors_by_kind:
        lines.append("  errors: " + ", ".join(f"{k} {v}" for k, v in sorted(r.errors_by_kind.items())))
        for kind, example in sorted(r.error_examples.items()):
            lines.append(f"    {kind}, e.g.: {example}")
    if r.usage_estimated:
        lines.append(
            f"  usage: the server reported none for {r.usage_estimated} request(s); "
            "their token counts are estimates"
        )
    for said in r.compatibility:
        lines.append(f"  compatibility: {said}")
    if r.bottleneck == "client":
        lines.append(
            "  warning: the generator itself ran late (send or loop lag > 10 ms): "
            "it is part of what was measured"
        )
    return "\n".join(lines)
