"""The status page at ``/``, in a real browser: headless Chromium (Debian's ``chromium``
and ``chromium-driver``) driven by Selenium, against a real daemon host and Hypercorn on
127.0.0.1, on asyncio and trio. The browser's calls run in worker threads while the
daemon runs on the test's loop; every wait is for what the page shows, under a deadline."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from test_service import running, seed_retry_cases

from greenroom.daemon._config import AgentPoolConfig
from greenroom.messages import AgentTask, TaskStatus

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        CHROMIUM is None or DRIVER is None,
        reason="needs Debian's chromium and chromium-driver (python3 dev.py test installs them)",
    ),
]


class Browser:
    """A headless Chromium; each call runs in a worker thread. The page redraws its tables
    every second, so reads and clicks run as one script in the page (no element handle
    goes stale between finding it and using it)."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def open(self, url: str) -> None:
        await self.call(self.driver.get, url)

    async def js(self, script: str, *args: Any) -> Any:
        return await self.call(self.driver.execute_script, script, *args)

    async def until(self, script: str, *args: Any, timeout: float = 20) -> Any:
        """What ``script`` returns in the page once it is truthy (checked every 50 ms)."""
        from selenium.webdriver.support.ui import WebDriverWait

        wait = WebDriverWait(self.driver, timeout, poll_frequency=0.05)
        return await self.call(wait.until, lambda driver: driver.execute_script(script, *args))

    async def shown(self, element_id: str) -> bool:
        return bool(await self.js("return !document.getElementById(arguments[0]).hidden", element_id))

    async def log_in(self, token: str) -> None:
        from selenium.webdriver.common.by import By

        def type_it() -> None:  # typed and clicked as a person would
            field = self.driver.find_element(By.ID, "token")
            field.clear()
            field.send_keys(token)
            self.driver.find_element(By.CSS_SELECTOR, "#login-form button").click()

        await self.call(type_it)

    async def click(self, css: str) -> None:
        await self.js("document.querySelector(arguments[0]).click()", css)


@asynccontextmanager
async def chromium(tmp_path: Path, *, javascript: bool = True) -> AsyncIterator[Browser]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    if not javascript:  # the page as it is before (or without) its script
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1280,1600", f"--user-data-dir={tmp_path / ('chromium' if javascript else 'no-js')}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = await anyio.to_thread.run_sync(
        lambda: webdriver.Chrome(options=options, service=Service(DRIVER))
    )
    try:
        yield Browser(driver)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(driver.quit)


COUNT = (
    "const n = document.querySelector(`.count[data-status='${arguments[0]}'] .n`); "
    "return n !== null && Number(n.textContent) === arguments[1]"
)
"""True once the page shows ``arguments[1]`` tasks in state ``arguments[0]``."""


async def test_without_a_valid_token_the_page_is_a_login_form_and_nothing_else(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        async with httpx2.AsyncClient(base_url=daemon.url) as http:
            page = await http.get("/")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert 'id="login-form"' in page.text
            assert "script-src 'self'" in page.headers["content-security-policy"]
            for token in daemon.tokens.values():
                assert token not in page.text
        async with chromium(tmp_path) as browser:
            await browser.open(daemon.url + "/")
            assert await browser.shown("login") and not await browser.shown("dashboard")
            await browser.log_in("not-a-token")
            said = await browser.until("return document.getElementById('login-error').textContent")
            assert said == "That token is not valid."
            await browser.log_in(daemon.tokens["alice"])  # a chat token: not for tasks
            said = await browser.until(
                "const t = document.getElementById('login-error').textContent; "
                "return t.includes('tasks') && t"
            )
            assert said == "That token may not read tasks (it needs the tasks or admin scope)."
            assert not await browser.shown("dashboard")
            shown = "return document.querySelectorAll('#counts .count, #tasks tbody tr, #events li').length"
            assert await browser.js(shown) == 0
            assert "token" not in await browser.call(lambda: browser.driver.current_url)


async def test_counts_move_while_tasks_run_and_a_task_leads_to_its_events(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until(COUNT, "COMPLETED", 0)
        await ops.submit([AgentTask(id=f"w{n}", type="write", input={"topic": f"t{n}"}) for n in range(5)])
        await browser.until(COUNT, "COMPLETED", 5)
        assert (await ops.status())["tasks"]["by_status"].get("COMPLETED") == 5
        await browser.until("return document.querySelector('#tasks tr[data-task=\"w3\"]') !== null")
        await browser.click('#tasks tr[data-task="w3"]')
        await browser.until("return document.getElementById('task-id').textContent === 'w3'")
        events = await browser.until(
            "const e = [...document.querySelectorAll('#task-events li')]"
            ".map(li => [li.dataset.type, li.dataset.task]); "
            "return e.some(([t]) => t === 'TASK_COMPLETED') && e"
        )
        kinds = [kind for kind, _ in events]
        assert kinds[0] == "TASK_SUBMITTED" and "TASK_CLAIMED" in kinds and "TASK_COMPLETED" in kinds
        assert {task for _, task in events} == {"w3"}  # that task's events only
        await browser.until(
            "return document.querySelector('#events li[data-type=\"TASK_COMPLETED\"]') !== null"
        )
        if os.environ.get("GREENROOM_SCREENSHOT"):  # docs/status-page.png is made this way
            await browser.call(browser.driver.save_screenshot, os.environ["GREENROOM_SCREENSHOT"])


async def test_a_waiting_call_is_approved_on_the_page_and_the_task_finishes(tmp_path: Path) -> None:
    pools = {"publish": AgentPoolConfig(agent="greenroom.agents.examples:PublishAgent", concurrency=1)}
    async with (
        running(tmp_path, agents=pools) as daemon,
        chromium(tmp_path) as browser,
        daemon.client("ops") as ops,
    ):
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await ops.submit([AgentTask(id="pub", type="publish", input={"title": "notes"})])
        item = "document.querySelector('#approvals li[data-task=\"pub\"]')"
        shown = await browser.until(f"const li = {item}; return li && li.textContent")
        assert "publish" in shown and "notes" in shown  # the exact call: tool and arguments
        await browser.js("window.confirm = () => false")  # asked first: a "no" sends nothing
        await browser.click('#approvals li[data-task="pub"] button.approve')
        assert (await ops.get_task("pub")).status is TaskStatus.WAITING
        await browser.js("window.confirm = () => true")
        await browser.click('#approvals li[data-task="pub"] button.approve')
        await browser.until(COUNT, "COMPLETED", 1)
        done = await ops.get_task("pub")
        assert done.status is TaskStatus.COMPLETED
        assert next(iter(done.decisions.values()))["by"] == "ops"
        await browser.until("return document.querySelectorAll('#approvals li').length === 0")
        await browser.until("return document.querySelector('#tasks tr[data-task=\"pub\"]') !== null")
        await browser.click('#tasks tr[data-task="pub"]')  # its durable journal: the reply, the call
        steps = await browser.until(
            "const s = [...document.querySelectorAll('#task-steps li')]"
            ".map(li => [li.dataset.key, li.dataset.kind]); return s.length > 0 && s"
        )
        journal = {key: kind for key, kind in steps}
        assert journal["p0/main/m0"] == "model" and journal["p0/main/m0/t0"] == "tool"
        assert not await browser.shown("notice")  # the unconfirmed click sent nothing (no "already decided")


async def test_the_login_form_never_puts_the_token_in_a_url_even_before_its_script_runs(
    tmp_path: Path,
) -> None:
    """Enter pressed in the login form while the page's script has not run (slow, blocked):
    the browser sends the form itself — which must carry no token into the address bar or
    the history."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    async with running(tmp_path) as daemon, chromium(tmp_path, javascript=False) as browser:
        await browser.open(daemon.url + "/")
        secret = daemon.tokens["ops"]

        def type_and_enter() -> None:
            field = browser.driver.find_element(By.ID, "token")
            field.send_keys(secret + Keys.ENTER)

        await browser.call(type_and_enter)
        await browser.until("return document.readyState === 'complete'")
        url = await browser.call(lambda: browser.driver.current_url)
        assert secret not in url and "token" not in url, url


async def test_a_late_answer_about_one_task_never_shows_over_the_task_clicked_after(tmp_path: Path) -> None:
    """The page's one-second refresh (or a slow click) answering about task A after a click
    on B: B's fields and events stay, A's are dropped."""
    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([AgentTask(id=i, type="idle", input={"which": i}) for i in ("slow-a", "b")])
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until("return document.querySelector('#tasks tr[data-task=\"b\"]') !== null")
        await browser.js(  # answers about slow-a arrive 1.5 s late
            "const real = window.fetch; window.lateDone = false; window.fetch = async (url, ...rest) => {"
            "  const answer = await real(url, ...rest);"
            "  if (String(url).includes('slow-a')) {"
            "    await new Promise((r) => setTimeout(r, 1500)); window.lateDone = true; }"
            "  return answer; };"
        )
        await browser.click('#tasks tr[data-task="slow-a"]')
        await browser.click('#tasks tr[data-task="b"]')
        await browser.until("return window.lateDone === true")  # slow-a's answers have come
        await browser.until("return document.getElementById('task-input').textContent.includes('\"b\"')")
        shown = await browser.js(
            "return [document.getElementById('task-id').textContent,"
            " document.getElementById('task-input').textContent,"
            " [...document.querySelectorAll('#task-events li')].map(li => li.dataset.task)]"
        )
        assert shown[0] == "b" and "slow-a" not in shown[1] and set(shown[2]) <= {"b"}, shown


async def test_a_refused_approval_stays_on_screen_and_logout_leaves_no_task_behind(tmp_path: Path) -> None:
    """Another person decided first: the page's approval is refused, and the refusal stays
    through the refreshes until dismissed. After logging out, nothing of the last task
    (its id included) is left in the page."""
    from greenroom.messages import Claim, Park

    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([AgentTask(id="both", type="idle")])
        supervisor = daemon.host.supervisor
        claimed = (await supervisor.ask(Claim("agent", "idle"))).task
        await supervisor.ask(
            Park(claimed.id, "agent", {"step": "p0/main/m0/t0", "tool": "wire", "arguments": {}})
        )
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until("return document.querySelector('#approvals li[data-task=\"both\"]') !== null")
        await ops.decide("both", approved=True)  # someone else, first
        await browser.js(
            "window.confirm = () => true; decide('both', 'approve')"
        )  # this page's person's click
        said = await browser.until("return !document.getElementById('notice').hidden && "
                                   "document.getElementById('notice-text').textContent")  # fmt: skip
        assert "Could not approve both" in said
        await browser.until(COUNT, "WAITING", 0)  # refreshed since, more than once
        await browser.until("return document.querySelectorAll('#approvals li').length === 0")
        assert await browser.js("return document.getElementById('notice-text').textContent") == said
        await browser.click("#notice-close")
        assert await browser.js("return document.getElementById('notice').hidden")
        await browser.until("return document.querySelector('#tasks tr[data-task=\"both\"]') !== null")
        await browser.click('#tasks tr[data-task="both"]')
        await browser.until("return document.getElementById('task-id').textContent === 'both'")
        await browser.click("#logout")
        await browser.until("return !document.getElementById('login').hidden")
        assert "both" not in await browser.js("return document.body.innerHTML")


async def test_many_waiting_calls_are_previewed_then_decided_on_the_page(tmp_path: Path) -> None:
    """The bulk form: a filter previewed (what would be decided, nothing changes), then
    applied after a confirmation — each task decided as the token's user; the others
    untouched."""
    from greenroom.messages import Claim, Park

    rerun = {"step": "p0/main/m0/t0#rerun", "tool": "append", "arguments": {"line": "x"},
             "question": "it may have run"}  # fmt: skip
    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([AgentTask(id=i, type="idle") for i in ("r1", "r2", "plain")])
        supervisor = daemon.host.supervisor
        for agent, call in (
            ("a", rerun),
            ("b", rerun),
            ("c", {**rerun, "step": "p0/main/m0/t0", "tool": "wire"}),
        ):
            call = {
                key: value for key, value in call.items() if key != "question" or call["tool"] == "append"
            }
            claimed = (await supervisor.ask(Claim(agent, "idle"))).task
            await supervisor.ask(Park(claimed.id, agent, call))
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until(COUNT, "WAITING", 3)
        await browser.js(
            "document.getElementById('bulk-may-have-run').checked = true;"
            "document.getElementById('bulk-verdict').value = 'done';"
            "document.getElementById('bulk-preview').click();"
        )
        shown = await browser.until("return document.getElementById('bulk-shown').textContent")
        assert shown.startswith("2 call(s) would be recorded as done") and "plain" not in shown, shown
        assert (await ops.get_task("r1")).status is TaskStatus.WAITING  # a preview decides nothing
        await browser.js("window.confirm = () => true; document.getElementById('bulk-apply').click()")
        said = await browser.until("return document.getElementById('notice-text').textContent")
        assert said.startswith("Decided 2 of 2"), said
        await browser.until(COUNT, "WAITING", 1)
        for task_id in ("r1", "r2"):
            decided = await ops.get_task(task_id)
            assert decided.status is TaskStatus.PENDING
            assert (
                decided.decisions[rerun["step"]]["by"] == "ops"
                and decided.decisions[rerun["step"]]["as_done"]
            )
        assert (await ops.get_task("plain")).status is TaskStatus.WAITING


FIND = (
    "document.getElementById('find-id').value = arguments[0]; document.querySelector('#find button').click()"
)
"""Open the task ``arguments[0]`` through the page's search by id."""
NOTICE = (
    "return !document.getElementById('notice').hidden && document.getElementById('notice-text').textContent"
)
"""The notice on screen once there is one."""


async def test_a_failed_task_is_found_by_id_retried_then_cancelled_on_the_page(tmp_path: Path) -> None:
    """Issue 40's actions: a task opened by its id shows its state in colour; Retry (after a
    confirmation) runs it again and its dependent waits for it again; Cancel takes both;
    a refused action stays on screen."""
    from greenroom.messages import AgentError, Claim, Fail

    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([AgentTask(id="flaky", type="idle", max_attempts=1),
                          AgentTask(id="after", type="idle", depends_on=["flaky"])])  # fmt: skip
        supervisor = daemon.host.supervisor
        await supervisor.ask(Claim("agent", "idle"))
        await supervisor.ask(Fail("flaky", "agent", AgentError(reason="the API was down")))
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until(COUNT, "FAILED", 1)
        await browser.js(FIND, "nope")
        assert "No task with id nope" in await browser.until(NOTICE)
        await browser.click("#notice-close")
        await browser.js(FIND, "flaky")
        await browser.until("return document.getElementById('task-id').textContent === 'flaky'")
        colour = await browser.until(
            "const s = document.getElementById('task-state'); return s && s.textContent === 'FAILED' && "
            "getComputedStyle(s).color"
        )
        assert colour == "rgb(198, 40, 40)"  # red, beside the word
        assert await browser.shown("task-retry") and await browser.shown("task-cancel") is False
        await browser.js("window.confirm = () => false; document.getElementById('task-retry').click()")
        assert (await ops.get_task("flaky")).status is TaskStatus.FAILED  # not confirmed: nothing sent
        await browser.js("window.confirm = () => true; document.getElementById('task-retry').click()")
        await browser.until(COUNT, "FAILED", 0)
        retried = await ops.get_task("flaky")
        assert retried.status is TaskStatus.PENDING and retried.retries[0]["by"] == "ops"
        assert (await ops.get_task("after")).status is TaskStatus.PENDING
        await browser.until("return document.querySelectorAll('#task-retries li').length === 1")
        await browser.until("return !document.getElementById('task-cancel').hidden")
        await browser.js("act('retry')")  # a stale page's retry of a task that is PENDING now
        said = await browser.until(NOTICE)
        assert "Could not retry flaky" in said and "PENDING" in said
        await browser.js("window.confirm = () => true; document.getElementById('task-cancel').click()")
        await browser.until(COUNT, "CANCELLED", 1)
        assert (await ops.get_task("after")).status is TaskStatus.DEPENDENCY_FAILED
        assert await browser.js("return document.getElementById('notice-text').textContent") == said


async def test_the_task_view_links_upstream_shows_times_with_dates_and_explains_an_empty_page(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit(
            [AgentTask(id="up", type="idle"), AgentTask(id="down", type="idle", depends_on=["up"])]
        )
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until("return document.querySelector('#tasks tr[data-task=\"down\"]') !== null")
        updated = await browser.js(
            "return document.querySelector('#tasks tr[data-task=\"down\"] td:last-child').title"
        )
        assert __import__("re").fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", updated), updated
        assert await browser.js("return document.getElementById('page-count').textContent") == "page 1 of 1"
        await browser.click('#tasks tr[data-task="down"]')
        await browser.until("return document.querySelector('#task-upstream a[data-task=\"up\"]') !== null")
        await browser.click('#task-upstream a[data-task="up"]')
        await browser.until("return document.getElementById('task-id').textContent === 'up'")
        await browser.until("return !document.getElementById('no-upstream').hidden")
        await browser.until(
            "return document.querySelector('#task-downstream a[data-task=\"down\"]') !== null"
        )
        await browser.click('#task-downstream a[data-task="down"]')  # and back, the other way
        await browser.until("return document.getElementById('task-id').textContent === 'down'")
        await browser.until("return !document.getElementById('no-downstream').hidden")  # drawn after the task
        assert await browser.js("return document.querySelectorAll('#task-downstream li').length") == 0
        await browser.js(
            "document.getElementById('filter-status').value = arguments[0];"
            "document.querySelector('#filter button').click()",
            "FAILED",
        )
        empty = await browser.until(
            "const c = document.querySelector('#tasks td.empty'); return c && c.textContent"
        )
        assert empty == "No task matches this filter."


POINTS = (
    "const l = document.querySelector(`#${arguments[0]} polyline[data-series='${arguments[1]}']`); "
    "const n = l ? l.getAttribute('points').split(' ').length : 0; return n > arguments[2] ? n : 0"
)
"""The points of chart ``arguments[0]``'s line ``arguments[1]``, once more than ``arguments[2]``."""


async def test_the_charts_over_time_fill_in_and_move_while_tasks_run(tmp_path: Path) -> None:
    """Issue 40's "over time": the daemon samples its figures (here every 0.1 s); the page
    draws them and redraws as samples come — the queue while tasks wait, the finished rate
    once they complete."""
    from test_service import _api

    pools = {"write": AgentPoolConfig(agent="greenroom.agents.examples:WriteAgent", concurrency=1)}
    async with (
        running(tmp_path, agents=pools, api=_api(history_every=0.1)) as daemon,
        chromium(tmp_path) as browser,
        daemon.client("ops") as ops,
    ):
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        first = await browser.until(POINTS, "chart-queue", "pending", 1)
        assert not await browser.shown("no-history")
        await browser.until(POINTS, "chart-queue", "pending", first)  # redrawn with newer samples
        await ops.submit([AgentTask(id=f"w{i}", type="write", input={"topic": "t"}) for i in range(5)])
        await browser.until(
            "return Array.from(document.querySelectorAll('#chart-finished polyline[data-series=completed]'))"
            ".some((l) => l.getAttribute('points').split(' ').some((p) => Number(p.split(',')[1]) < 105))"
        )  # a completion rate above zero drawn
        await browser.until(POINTS, "chart-types", "type:write", 1)  # the write type's queue, over time
        assert await browser.js(
            "return document.querySelector('#chart-types-key [data-series]').textContent"
        ) == ("write")
        swatch = await browser.js(
            "return document.querySelector('#chart-types-key svg').getBoundingClientRect().width"
        )
        assert swatch <= 12  # a square beside the name, not a chart's width
        said = await browser.js("return document.getElementById('chart-queue').getAttribute('aria-label')")
        assert said.startswith("tasks waiting and running, now: pending "), said  # what a screen reader hears
        async with daemon.http("ops") as http:
            history = (await http.get("/v1/history")).json()
        assert history["every"] == 0.1 and max(s["completed"] for s in history["samples"]) == 5


async def test_a_waiting_call_is_denied_on_the_page_after_a_confirmation(tmp_path: Path) -> None:
    """Deny: asked first (a "no" sends nothing), then the call is denied as the token's
    user and the task goes on without it."""
    from greenroom.messages import Claim, Park

    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([AgentTask(id="wire", type="idle")])
        supervisor = daemon.host.supervisor
        claimed = (await supervisor.ask(Claim("agent", "idle"))).task
        await supervisor.ask(
            Park(
                claimed.id, "agent", {"step": "p0/main/m0/t0", "tool": "wire_money", "arguments": {"usd": 9}}
            )
        )
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        deny = '#approvals li[data-task="wire"] button.deny'
        await browser.until(f"return document.querySelector('{deny}') !== null")
        label = await browser.js(f"return document.querySelector('{deny}').getAttribute('aria-label')")
        assert label == "Deny wire"
        asked: list[str] = await browser.js(
            "window.asked = []; window.confirm = (q) => { window.asked.push(q); return false; };"
            f"document.querySelector('{deny}').click(); return window.asked"
        )
        assert len(asked) == 1 and "Deny wire?" in asked[0] and "does not run" in asked[0]
        await browser.js(f"window.confirm = () => true; document.querySelector('{deny}').click()")
        await browser.until(COUNT, "WAITING", 0)
        denied = await ops.get_task("wire")
        decision = denied.decisions["p0/main/m0/t0"]
        assert denied.status is TaskStatus.PENDING and (decision["approved"], decision["by"]) == (
            False,
            "ops",
        )
        assert len(denied.decisions) == 1 and not await browser.shown("notice")


FILTER = (
    "const [fields, button] = arguments; for (const [id, value] of Object.entries(fields)) {"
    " const e = document.getElementById(id);"
    " if (e.type === 'checkbox') e.checked = value; else e.value = value; }"
    " document.querySelector(button || '#filter button[type=submit]').click()"
)
"""Set the filter's fields (``arguments[0]``: id -> value) and press ``arguments[1]``
(default: Filter)."""
ROWS = "return [...document.querySelectorAll('#tasks tbody tr[data-task]')].map((tr) => tr.dataset.task)"
"""The ids in the tasks table, top to bottom."""


async def test_tasks_are_searched_filtered_sorted_and_paged_on_the_page(tmp_path: Path) -> None:
    """Issue 40's task list: text in the id or the input, the owner, newest first with its
    pages, "failed in the last hour" in one click, and Clear; every field labelled."""
    from greenroom.messages import AgentError, Claim, Fail

    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        notes = ["Quarterly report" if i % 5 == 0 else "misc" for i in range(25)]
        tasks = [AgentTask(id=f"t{i:02}", type="idle", input={"note": note}) for i, note in enumerate(notes)]
        await ops.submit([*tasks, AgentTask(id="broken", type="flaky", max_attempts=1)])
        supervisor = daemon.host.supervisor
        await supervisor.ask(Claim("worker-7", "idle"))  # t00
        await supervisor.ask(Claim("worker-7", "flaky"))
        await supervisor.ask(Fail("broken", "worker-7", AgentError(reason="no")))
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until("return document.querySelectorAll('#tasks tbody tr[data-task]').length === 20")
        unlabelled = await browser.js(
            "return [...document.querySelectorAll('#dashboard input, #dashboard select')]"
            ".filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id)"
        )
        assert unlabelled == []
        await browser.js(FILTER, {"filter-text": "QUARTERLY"})
        await browser.until(ROWS + ".join() === 't00,t05,t10,t15,t20'")
        assert await browser.js("return document.getElementById('page-count').textContent") == "page 1"
        await browser.js(FILTER, {"filter-text": "", "filter-owner": "worker-7"})
        await browser.until(ROWS + ".join() === 't00,broken'")
        await browser.js(FILTER, {"filter-owner": "", "filter-order": "newest"})
        first = await browser.until(ROWS + ".length === 20 && " + ROWS[7:])
        assert first[0] == "broken" and first[1:3] == ["t24", "t23"], first
        assert await browser.js("return document.getElementById('page-count').textContent") == "page 1 of 2"
        await browser.click("#next-page")
        second = await browser.until(ROWS + ".length === 6 && " + ROWS[7:])
        assert second == ["t05", "t04", "t03", "t02", "t01", "t00"]
        await browser.click("#failed-hour")
        await browser.until(ROWS + ".join() === 'broken'")
        chosen = await browser.js(
            "return ['filter-status', 'filter-within', 'filter-order']"
            ".map((id) => document.getElementById(id).value)"
        )
        assert chosen == ["FAILED", "3600", "newest"]
        await browser.click("#filter-clear")
        await browser.until(ROWS + ".length === 20 && " + ROWS[7:] + "[0] === 't00'")
        await browser.call(browser.driver.set_window_size, 400, 900)  # a narrow window: nothing runs off
        await browser.click('#tasks tr[data-task="t00"]')  # the side (a wide table scrolls in its own box)
        await browser.until("return document.getElementById('task-id').textContent === 't00'")
        assert await browser.until(
            "const d = document.documentElement; return d.clientWidth < 420 && d.scrollWidth <= d.clientWidth"
        )


async def test_the_task_view_draws_attempts_steps_and_neighbours_each_clickable(tmp_path: Path) -> None:
    """A task's attempts as a timeline (who, how long, how it ended), its step journal
    with each model call's latency, time to first token, tokens and cost and each tool
    call folded, and its neighbours drawn as a graph whose nodes open them — from the
    keyboard too (Enter on a row; the view takes the focus)."""
    from greenroom.harness._journal import RecordSteps
    from greenroom.messages import AgentError, AgentResult, Claim, Complete, Fail
    from greenroom.store import Step

    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([
            AgentTask(id="up-a", type="idle"), AgentTask(id="up-b", type="idle"),
            AgentTask(id="mid", type="work", depends_on=["up-a", "up-b"]),
            AgentTask(id="down", type="idle", depends_on=["mid"]),
        ])  # fmt: skip
        supervisor = daemon.host.supervisor
        for task_id in ("up-a", "up-b"):
            await supervisor.ask(Claim("helper", "idle"))
            await supervisor.ask(Complete(task_id, "helper", AgentResult(task_id=task_id)))
        await supervisor.ask(Claim("agent-a", "work"))
        await supervisor.ask(Fail("mid", "agent-a", AgentError(reason="the API was down", retryable=True)))
        await supervisor.ask(Claim("agent-b", "work"))
        model = {
            "text": "",
            "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "sky"}}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 10},
            "finish_reason": "tool_calls",
            "timing": {"first_token": 0.25, "duration": 1.2, "tokens_per_second": 40.0},
            "cost": 0.00125,
        }
        tool = {"record": {"id": "c1", "name": "lookup", "arguments": {"q": "sky"}, "ok": True,
                           "result": {"colour": "blue"}}, "content": '{"colour":"blue"}'}  # fmt: skip
        await daemon.host.journal.ask(RecordSteps((
            Step(task_id="mid", key="p0/main/m0", kind="model", fingerprint="x", body=model, attempt=2),
            Step(task_id="mid", key="p0/main/m0/t0", kind="tool", fingerprint="y", body=tool, attempt=2),
        )))  # fmt: skip
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until("return document.querySelector('#tasks tr[data-task=\"mid\"]') !== null")
        await browser.js(  # the keyboard: focus the row, press Enter
            "const row = document.querySelector('#tasks tr[data-task=\"mid\"]'); row.focus();"
            "row.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}))"
        )
        await browser.until("return document.getElementById('task-id').textContent === 'mid'")
        assert await browser.js("return document.activeElement.id") == "task-heading"
        attempts = await browser.until(
            "const a = [...document.querySelectorAll('#task-attempts li')]"
            ".map((li) => [li.dataset.agent, li.dataset.outcome, li.textContent]); return a.length === 2 && a"
        )
        assert [(agent, outcome) for agent, outcome, _ in attempts] == [
            ("agent-a", "ended, runs again"), ("agent-b", "running")
        ]  # fmt: skip
        assert "the API was down" in attempts[0][2] and "running for" in attempts[1][2]
        queued = await browser.js("return document.getElementById('task-queued').textContent")
        assert queued.startswith("Queued ") and queued.endswith(" before its first attempt."), queued
        assert await browser.js("return document.querySelectorAll('#task-timeline rect.attempt').length") == 2
        step = "document.querySelector('#task-steps li[data-kind=\"model\"]')"
        figures = await browser.until(
            f"const li = {step}; return li && ['latency', 'first-token', 'tokens', 'cost']"
            ".map((c) => li.querySelector('.' + c).textContent)"
        )
        assert figures == ["1200 ms", "first token 250 ms", "40 tokens (30 in, 10 out)", "cost 0.00125"]
        folded = await browser.js(
            "const li = document.querySelector('#task-steps li[data-kind=\"tool\"]');"
            "const d = li.querySelector('details'); return [d.open, d.querySelector('summary').textContent,"
            " JSON.parse(d.querySelector('pre').textContent), li.querySelector('.outcome').textContent]"
        )
        call = {"arguments": {"q": "sky"}, "result": {"colour": "blue"}}
        assert folded == [False, "arguments and result", call, "ok"]
        nodes = await browser.until(
            "const n = [...document.querySelectorAll('#task-graph a[data-task]')]"
            ".map((a) => [a.dataset.task, a.dataset.status]); return n.length === 3 && n"
        )
        assert sorted(nodes) == [["down", "PENDING"], ["up-a", "COMPLETED"], ["up-b", "COMPLETED"]]
        current = "document.querySelector('#task-graph .current')"
        assert await browser.js(f"return {current}.dataset.status") == "IN_PROGRESS"
        assert await browser.js("return document.querySelectorAll('#task-graph path.edge').length") == 3
        await browser.js(
            "document.querySelector('#task-graph a[data-task=\"down\"]')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}))"
        )
        await browser.until("return document.getElementById('task-id').textContent === 'down'")
        await browser.until(f"return {current} && {current}.textContent.includes('down')")
        await supervisor.ask(Complete("mid", "agent-b", AgentResult(task_id="mid")))  # redrawn as it changes
        await browser.until(
            "const node = document.querySelector('#task-graph a[data-task=\"mid\"]');"
            "return node && node.dataset.status === 'COMPLETED'"
        )


# -- what outside checks found (issue 48, points 8-10) --------------------------------------


async def test_a_focused_row_keeps_the_focus_and_a_selection_across_refreshes(tmp_path: Path) -> None:
    """Tab to a task row; the list refreshes (another task changed): the row still has the
    keyboard focus, Enter opens it, and text selected in the table stays selected."""
    from selenium.webdriver.common.keys import Keys

    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit(
            [AgentTask(id=i, type="nobody", input={"n": i}) for i in ("first", "second", "third")]
        )
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        row = "document.querySelector('#tasks tr[data-task=\"second\"]')"
        await browser.until(f"return {row} !== null")
        await browser.js(  # the keyboard reaches the row; a person selects the type of the first row
            f"{row}.focus();"
            "const cell = document.querySelector('#tasks tr[data-task=\"first\"] td:nth-child(2)');"
            "const range = document.createRange(); range.selectNodeContents(cell);"
            "getSelection().removeAllRanges(); getSelection().addRange(range);"
        )
        assert await browser.js(f"return document.activeElement === {row}")
        await ops.cancel("third")  # the next refresh redraws the list: its state cell changes
        await browser.until(
            "const c = document.querySelector('#tasks tr[data-task=\"third\"] td[data-status]');"
            "return c && c.textContent === 'CANCELLED'"
        )
        await browser.until(
            "return document.querySelector('.count[data-status=CANCELLED] .n').textContent === '1'"
        )
        assert await browser.js(f"return document.activeElement === {row}"), await browser.js(
            "return document.activeElement.tagName"
        )
        assert await browser.js("return getSelection().toString()") == "nobody"
        await browser.call(lambda: browser.driver.switch_to.active_element.send_keys(Keys.ENTER))
        await browser.until("return document.getElementById('task-id').textContent === 'second'")


async def test_retry_is_offered_only_where_the_daemon_allows_it_saying_why_not(tmp_path: Path) -> None:
    """A DEPENDENCY_FAILED task whose cause was cancelled: its Retry is shown disabled, with
    the daemon's reason beside it; one whose cause failed: Retry is offered and works."""
    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await seed_retry_cases(daemon, ops)
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.until(COUNT, "DEPENDENCY_FAILED", 2)
        await browser.js(FIND, "after-gone")
        shown = await browser.until(
            "const b = document.getElementById('task-retry');"
            "const why = document.getElementById('task-retry-why');"
            "return document.getElementById('task-id').textContent === 'after-gone' && !why.hidden &&"
            " [b.hidden, b.disabled, why.textContent]"
        )
        assert shown[:2] == [False, True] and "its dependency 'gone' is CANCELLED" in shown[2], shown
        assert await browser.shown("task-cancel") is False  # final: not offered
        await browser.js("window.confirm = () => true; document.getElementById('task-retry').click()")
        assert (await ops.get_task("after-gone")).status is TaskStatus.DEPENDENCY_FAILED  # nothing was sent
        assert not await browser.shown("notice")
        await browser.js(FIND, "after-f")
        await browser.until(
            "const b = document.getElementById('task-retry');"
            "return document.getElementById('task-id').textContent === 'after-f' && !b.hidden && !b.disabled"
        )
        assert not await browser.shown("task-retry-why")
        await browser.js("window.confirm = () => true; document.getElementById('task-retry').click()")
        await browser.until(COUNT, "DEPENDENCY_FAILED", 1)
        assert (await ops.get_task("f")).status is TaskStatus.PENDING


async def test_a_task_opened_after_another_never_shows_the_earlier_ones_details(tmp_path: Path) -> None:
    """Every change of the page is watched: at no moment does the heading name one task
    while the events or neighbours of the one shown before are drawn under it."""
    async with running(tmp_path) as daemon, chromium(tmp_path) as browser, daemon.client("ops") as ops:
        await ops.submit([
            AgentTask(id="base", type="nobody"), AgentTask(id="alpha", type="nobody", depends_on=["base"]),
            AgentTask(id="beta", type="nobody"),
        ])  # fmt: skip
        await browser.open(daemon.url + "/")
        await browser.log_in(daemon.tokens["ops"])
        await browser.js(FIND, "alpha")
        await browser.until(
            "return document.querySelectorAll('#task-events li[data-task=\"alpha\"]').length > 0 &&"
            " document.querySelectorAll('#task-upstream a[data-task=\"base\"]').length === 1"
        )
        await browser.js(  # from now on, every state of the view is checked
            "window.stale = []; const view = document.getElementById('task-section');"
            "new MutationObserver(() => {"
            "  const head = document.getElementById('task-id').textContent;"
            "  const tasks = (css) => [...document.querySelectorAll(css)].map((node) => node.dataset.task);"
            "  const events = tasks('#task-events li'), upstream = tasks('#task-upstream a');"
            "  if (head === 'beta' && (events.some((t) => t !== 'beta') || upstream.length))"
            "    window.stale.push([head, events, upstream]);"
            "}).observe(view, {subtree: true, childList: true, characterData: true});"
        )
        await browser.js(FIND, "beta")
        await browser.until(
            "return document.getElementById('task-id').textContent === 'beta' &&"
            " document.querySelectorAll('#task-events li[data-task=\"beta\"]').length > 0"
        )
        await browser.until("return !document.getElementById('no-upstream').hidden")
        assert await browser.js("return window.stale") == []
