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
from test_service import running

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
async def chromium(tmp_path: Path) -> AsyncIterator[Browser]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1280,1600", f"--user-data-dir={tmp_path / 'chromium'}",
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
