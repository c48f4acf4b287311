"""A real browser through the README's UI path: ``dagster dev`` (webserver + daemon) on 127.0.0.1
in a temporary DAGSTER_HOME, Debian's Chromium driven by Playwright.

Start a research from ``start_research_job``'s launchpad by typing a question full of spaces
and punctuation into its empty ``question`` field, wait for the start run and the
``research_job`` run the ``start_research_sensor`` launches, then open ``research_report``'s
latest materialization, read the question there and find the report text and a reference in
its Markdown view; last, the table of an evaluation (``deepresearch eval``) in
``evaluation_results``' materialization. Screenshots go to ``artifacts/ui-screenshots/`` (or
``$DEEPRESEARCH_UI_SCREENSHOTS``); their folder is printed.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``; ``.ci/run`` installs it) and the
``playwright`` Python package (dev extras); ``playwright install`` is never needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from deepresearch_dagster.core.naming import partition_key_for
from tests.test_ui_smoke import _free_port, _stop

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCATION = "deepresearch_dagster.definitions"  # workspace.yaml's python_module
QUESTION = "Sodium-ion batteries: how do they work, and what do they cost (per kWh)? [a 2026 view]"
STARTUP_S = 120  # `dagster dev` on a busy 2-core machine: webserver, daemon, code servers
RUN_S = 150
POLL_S = 0.25  # the GraphQL polls: a cheap query, so a run or sensor tick is seen within a quarter second

# The launchpad's editor (CodeMirror): the cursor between the quotes of the empty `question: ""`
# it opens with, as a person clicking there would leave it; returns that line (null if none).
CURSOR_IN_EMPTY_QUESTION = """() => {
  const cm = document.querySelector('.CodeMirror').CodeMirror;
  for (let i = 0; i < cm.lineCount(); i++) {
    const m = cm.getLine(i).match(/^(\\s*question:\\s*)(["'])\\2\\s*$/);
    if (m) { cm.focus(); cm.setCursor({line: i, ch: m[1].length + 1}); return cm.getLine(i); }
  }
  return null;
}"""

# The Markdown dialog has faded in (for the screenshot): it and its ancestors are opaque and no
# transition of theirs or of its content is still running.
DIALOG_SETTLED = """() => {
  const d = document.querySelector('[role="dialog"]');
  if (!d) return false;
  for (let e = d; e; e = e.parentElement) if (getComputedStyle(e).opacity !== '1') return false;
  return document.getAnimations().every(a => a.playState !== 'running' || !a.effect || !a.effect.target
    || !(d.contains(a.effect.target) || a.effect.target.contains(d)));
}"""

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)


def _screens() -> Path:
    folder = Path(os.environ.get("DEEPRESEARCH_UI_SCREENSHOTS") or REPO / "artifacts" / "ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _wait_for_server(http: httpx.Client, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            body = http.post(
                "/graphql",
                json={
                    "query": "{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError {"
                    " __typename ... on PythonError { message } } } } } }"
                },
            ).json()
            entries = body["data"]["workspaceOrError"]["locationEntries"]
            status = entries[0]["locationOrLoadError"] if entries else None
            assert not status or status["__typename"] != "PythonError", status
            if status and status["__typename"] == "RepositoryLocation":
                return
        except (httpx.TransportError, ValueError, KeyError, TypeError):
            pass
        assert time.monotonic() < deadline, "dagster dev did not come up:\n" + log.read_text()[-3000:]
        time.sleep(POLL_S)


def _gql(http: httpx.Client, query: str, **variables: Any) -> dict[str, Any]:
    body = http.post("/graphql", json={"query": query, "variables": variables}).json()
    assert "errors" not in body, body["errors"]
    return body["data"]


def _wait_for_run(http: httpx.Client, run_id: str, log: Path) -> str:
    deadline = time.monotonic() + RUN_S
    while True:
        run = _gql(http, "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", id=run_id)
        status = run["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        assert time.monotonic() < deadline, f"run {run_id} still {status}:\n" + log.read_text()[-3000:]
        time.sleep(POLL_S)


def _research_run_started_by(http: httpx.Client, start_run_id: str, log: Path) -> str:
    """The research_job run the start_research_sensor launched for the start run."""
    deadline = time.monotonic() + RUN_S
    query = "query($tags: [ExecutionTag!]) { runsOrError(filter: {tags: $tags}) { ... on Runs { results { runId } } } }"
    while True:
        runs = _gql(http, query, tags=[{"key": "deepresearch/started_by", "value": start_run_id}])
        results = runs["runsOrError"]["results"]
        if results:
            return results[0]["runId"]
        assert time.monotonic() < deadline, "the sensor launched no research_job run:\n" + log.read_text()[-3000:]
        time.sleep(POLL_S)


def _skip_community_dialog(page: Any) -> None:
    """The webserver's one-time "Join the Dagster community" dialog would cover the launchpad."""
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()


def test_start_follow_and_read_a_research_in_chromium(isolated_env, corpus_dir, monkeypatch):
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    monkeypatch.setenv("DEEPRESEARCH_ENGINE", "offline")
    monkeypatch.setenv("DEEPRESEARCH_CORPUS", str(corpus_dir))
    monkeypatch.setenv("DAGSTER_TELEMETRY_ENABLED", "false")
    # A small research: the launchpad's options stay as they open (null = these settings).
    monkeypatch.setenv("DEEPRESEARCH_MAX_STEPS", "2")
    monkeypatch.setenv("DEEPRESEARCH_DEPTH", "0")
    screens = _screens()
    print(f"screenshots: {screens}")
    port = _free_port()
    log_path = isolated_env / "dagster_dev.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # An evaluation of one item, recorded in the same instance (as a user's CLI run beside `make
    # dev` is): its table is read in step 5. It runs while the UI starts and the research runs.
    suite = isolated_env / "suite.jsonl"
    item = {"id": "density", "question": "What energy density did sodium-ion cells reach?", "answers": ["160 Wh/kg"]}
    suite.write_text(json.dumps(item) + "\n")
    evaluation = subprocess.Popen(
        [sys.executable, "-m", "deepresearch_dagster.cli", "eval", str(suite), "--engine", "offline", "--json",
         "--quiet", "--max-steps", "2", "--depth", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ), cwd=REPO,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    key = partition_key_for(QUESTION)
    try:
        with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
            _wait_for_server(http, proc, log_path)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.set_default_timeout(60_000)
                    # Marks that dialog as seen (the webserver keeps the flag in localStorage).
                    page.add_init_script("window.localStorage.setItem('communityNux', 'true')")

                    # 1. The launchpad opens with an empty question: type ours between its quotes.
                    page.goto(f"{base}/locations/{LOCATION}/jobs/start_research_job/playground")
                    _skip_community_dialog(page)
                    editor = page.locator(".CodeMirror").first
                    editor.wait_for()
                    _skip_community_dialog(page)
                    assert "question:" in editor.inner_text()
                    page.get_by_text("No errors").first.wait_for()
                    page.screenshot(path=str(screens / "0_launchpad_prefilled.png"))
                    line = page.evaluate(CURSOR_IN_EMPTY_QUESTION)
                    assert line is not None, editor.inner_text()
                    page.keyboard.insert_text(QUESTION)
                    page.get_by_text("No errors").first.wait_for()
                    assert QUESTION in page.evaluate("document.querySelector('.CodeMirror').CodeMirror.getValue()")
                    page.screenshot(path=str(screens / "1_launchpad.png"))
                    page.get_by_role("button", name="Launch Run").click()

                    # 2. The start run registers the question and its partition.
                    page.wait_for_url(re.compile(r".*/runs/[0-9a-f-]{36}"))
                    start_run_id = page.url.rstrip("/").split("/runs/")[1].split("?")[0]
                    assert _wait_for_run(http, start_run_id, log_path) == "SUCCESS"
                    page.get_by_text(key).first.wait_for()
                    page.screenshot(path=str(screens / "2_start_run.png"))

                    # 3. The sensor launches research_job for the partition; follow it to success.
                    research_run_id = _research_run_started_by(http, start_run_id, log_path)
                    assert _wait_for_run(http, research_run_id, log_path) == "SUCCESS"
                    page.goto(f"{base}/runs/{research_run_id}")
                    page.get_by_text("Success").first.wait_for()
                    # The stages in plain words in the run's log (filtered: the log view is virtualized).
                    page.locator('input[placeholder^="Filter"]').first.fill("plan:")
                    page.get_by_text(re.compile(r"plan: .* \(\d+ steps?\)")).first.wait_for()
                    page.screenshot(path=str(screens / "3_research_run.png"))

                    # 4. research_report's latest materialization: the question beside the partition
                    # (its metadata), then the report as rendered Markdown.
                    page.goto(f"{base}/assets/research_report?view=events&partition={key}")
                    page.get_by_text(QUESTION).first.wait_for()
                    page.get_by_text("[Show Markdown]").first.click()
                    dialog = page.get_by_role("dialog")
                    dialog.get_by_text("References").first.wait_for()
                    text = dialog.inner_text()
                    assert QUESTION in text
                    assert "Executive summary" in text or "Key findings" in text, text[:2000]
                    reference = dialog.locator("li").filter(has_text=re.compile(r"^\s*\[\d+\]"))
                    assert reference.count() >= 1, text[-2000:]
                    assert "sodium_ion" in reference.first.inner_text()
                    page.wait_for_function(DIALOG_SETTLED)  # it fades in: the screenshot shows it opaque
                    page.screenshot(path=str(screens / "4_report.png"))

                    # 4b. tool_outputs' materialization: what the defences against untrusted
                    # content did (issue 28), beside the outside tools' listing (issue 29).
                    page.goto(f"{base}/assets/tool_outputs?view=events&partition={key}")
                    for label in ("tainted_calls", "refused_calls", "flagged_sources"):
                        page.get_by_text(label, exact=True).first.wait_for()
                    page.screenshot(path=str(screens / "4b_tool_outputs.png"))

                    # 5. evaluation_results' materialization: the per-item table and the summary.
                    out, err = evaluation.communicate(timeout=300)
                    assert evaluation.returncode == 0, err
                    evaluation_key = json.loads(out)["key"]
                    page.goto(f"{base}/assets/evaluation_results?view=events&partition={evaluation_key}")
                    page.get_by_text("[Show Markdown]").first.click()
                    dialog = page.get_by_role("dialog")
                    dialog.get_by_text(f"Evaluation {evaluation_key}").first.wait_for()
                    text = dialog.inner_text()
                    assert "density" in text and "plain answers" in text, text[:2000]
                    page.wait_for_function(DIALOG_SETTLED)
                    page.screenshot(path=str(screens / "5_evaluation.png"))
                finally:
                    browser.close()
    finally:
        if evaluation.poll() is None:
            evaluation.kill()
            evaluation.communicate()
        _stop(proc)
        # dagster dev's webserver, daemon and code servers share its session: none may outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    print(f"browser test took {time.monotonic() - started:.0f} s; screenshots in {screens}")
