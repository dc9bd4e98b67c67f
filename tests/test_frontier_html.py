"""frontier.html: the page's data (per-question answers, F1 spread, cost), its escaping of untrusted
text, exported runs without the benchmark's text, and the page itself in a real headless browser
(Debian's chromium driven by Playwright): it loads with no console error and no request, both plots
draw one mark per configuration that ran, hovering a mark shows its numbers, the filter and the
"configurations differ" toggle reduce the questions, a header click sorts, and an injected
``<script>`` in an answer stays text."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from memfrontier.frontier.export import published_row
from memfrontier.frontier.page import page_data, render_page
from memfrontier.frontier.report import build_report, write_report

HOSTILE = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _write_run(path: Path, rows: list[dict], construction_usd: float = 0.0) -> None:
    path.mkdir(parents=True)
    with (path / "predictions.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            q = {"calls": 1, "input_tokens": 100, "output_tokens": 10, "unpriced_calls": 0}
            f.write(json.dumps({**r, "usage": {"by_stage": {"query": q}}, "wall_s": 2.0}) + "\n")
    summary = {
        "config": {"dataset": "locomo"},
        "questions": len(rows),
        "construction": {"conv-1": {"usd": construction_usd}},
        "events": {},
        "provenance": {"answer_model": "m"},
    }
    (path / "summary.json").write_text(json.dumps(summary))


QUESTIONS = [
    "Where did Ana move?",
    "What does Ben paint? <img src=x onerror=alert(1)>",
    "Which pet?",
    "When was the trip?",
]


def _rows(f1s, usd, proxy_s, answers):
    return [
        {
            "id": f"q{i}",
            "category": "1",
            "question": QUESTIONS[i],
            "gold": f"gold {i}",
            "prediction": a,
            "f1": f,
            "usd": usd,
            "proxy_s": proxy_s,
            "evidence_recall": 1.0,
        }
        for i, (f, a) in enumerate(zip(f1s, answers))
    ]


@pytest.fixture
def frontier(tmp_path):
    """A two-configuration frontier (and one that did not run) written by write_report: rag and
    memorycpt agree on q3 only; memorycpt's answer to q1 is a script injection."""
    _write_run(tmp_path / "runs" / "rag", _rows([0.5, 0.5, 0.0, 0.5], 2e-4, 4.0, ["Paris", "oil", "a cat", "May"]))
    _write_run(
        tmp_path / "runs" / "cpt",
        _rows([0.7, 0.7, 0.9, 0.5], 1e-4, 1.0, ["Lyon", HOSTILE, "cat", "in May"]),
        construction_usd=2e-4,
    )
    runs = [
        {"label": "rag", "strategy": "rag", "dir": tmp_path / "runs" / "rag"},
        {"label": "memorycpt", "strategy": "memorycpt", "dir": tmp_path / "runs" / "cpt"},
        {"label": "router", "strategy": "budgetmem", "dir": None, "status": "missing router.pt"},
    ]
    report = build_report(runs)
    paths = write_report(
        report, tmp_path / "out", title="test <frontier>", run_dirs={r["label"]: r["dir"] for r in runs if r["dir"]}
    )
    return report, paths


def test_page_data_holds_each_answer_its_f1_cost_and_the_spread(frontier):
    report, paths = frontier
    preds = {
        label: [
            json.loads(line)
            for line in (paths["html"].parent.parent / "runs" / d / "predictions.jsonl").read_text().splitlines()
        ]
        for label, d in (("rag", "rag"), ("memorycpt", "cpt"))
    }
    data = page_data(report, preds)
    assert [c["label"] for c in data["configs"]] == ["rag", "memorycpt"]  # the router did not run: no config
    # C(n) = 2e-4 construction / 4 questions + 1e-4 online = 1.5e-4 USD -> x1e4 = 1.5
    assert data["configs"][1]["usd_x1e4_amortized"] == pytest.approx(1.5)
    assert data["configs"][1]["pareto_cost"] and not data["configs"][0]["pareto_cost"]
    q = {x["id"]: x for x in data["questions"]}
    assert list(q) == ["q0", "q1", "q2", "q3"]
    # spread = max F1 - min F1: |0.7 - 0.5|, |0.9 - 0.0|, 0 where both score 0.5
    assert q["q0"]["spread"] == pytest.approx(0.2) and q["q2"]["spread"] == pytest.approx(0.9)
    assert q["q3"]["spread"] == 0.0
    # [prediction, F1, USD x 1e4 online, proxy s] per configuration
    assert q["q0"]["answers"][0] == ["Paris", 0.5, pytest.approx(2.0), 4.0]
    assert q["q0"]["answers"][1] == ["Lyon", 0.7, pytest.approx(1.0), 1.0]
    assert q["q1"]["question"] == QUESTIONS[1] and q["q1"]["gold"] == "gold 1"


def test_untrusted_text_cannot_become_markup_and_the_page_requests_nothing(frontier):
    _, paths = frontier
    assert set(paths) >= {"json", "csv", "md", "plot_cost", "plot_latency", "html"}
    page = paths["html"].read_text("utf-8")
    assert HOSTILE not in page and "<img" not in page and "window.__pwned" in page  # there, escaped
    assert "\\u003c/script\\u003e\\u003cscript\\u003ewindow.__pwned" in page
    assert page.count("</script>") == 2  # the data block's and the code's, nothing else closes a script
    assert "<title>test &lt;frontier&gt;</title>" in page
    # nothing fetched: no src/href to another place, and a policy that forbids it
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "default-src 'none'" in page and "'unsafe-inline'" not in page.split("script-src")[1].split(";")[0]
    assert len(page.encode()) < 100_000


def test_an_exported_run_without_the_benchmark_text_shows_ids(tmp_path):
    rows = _rows([0.5, 1.0, 0.0, 0.5], 2e-4, 4.0, ["Paris", "oil", "a cat", "May"])
    _write_run(tmp_path / "rag", [published_row(r) for r in rows])
    report = build_report([{"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"}])
    data = page_data(report, {"rag": [published_row(r) for r in rows]})
    assert [(q["id"], q["question"], q["gold"]) for q in data["questions"]] == [
        ("q0", None, None),
        ("q1", None, None),
        ("q2", None, None),
        ("q3", None, None),
    ]
    assert data["questions"][1]["answers"] == [["oil", 1.0, pytest.approx(2.0), 4.0]]
    assert data["questions"][1]["spread"] == 0.0  # one configuration: nothing to differ from
    page = write_report(report, tmp_path / "out")["html"].read_text("utf-8")  # out/configs/rag: not there
    assert "No answers were found" in page and '"questions": []' in page
    page = render_page(report, {"rag": [published_row(r) for r in rows]})
    assert "This export holds no benchmark text" in page and '"question":null' in page.replace(" ", "")


def test_a_question_shows_its_text_from_any_configuration_that_holds_it(tmp_path):
    """A configuration resumed from an export holds no text in its carried rows: the question and
    gold come from another configuration's row, whichever comes first."""
    rows = _rows([0.5, 1.0, 0.0, 0.5], 2e-4, 4.0, ["Paris", "oil", "a cat", "May"])
    carried = [published_row(r) for r in rows[:2]] + rows[2:]  # two carried rows, two answered here
    _write_run(tmp_path / "rr", carried)
    _write_run(tmp_path / "rag", rows)
    runs = [
        {"label": "rr", "strategy": "rag", "dir": tmp_path / "rr"},
        {"label": "rag", "strategy": "rag", "dir": tmp_path / "rag"},
    ]
    report = build_report(runs)
    q = {x["id"]: x for x in page_data(report, {"rr": carried, "rag": rows})["questions"]}
    assert [q[i]["question"] for i in ("q0", "q1", "q2")] == QUESTIONS[:3]
    assert q["q0"]["gold"] == "gold 0" and q["q0"]["category"] == rows[0]["category"]
    alone = page_data(build_report(runs[:1]), {"rr": carried})["questions"]  # no other row holds it
    assert [x["question"] for x in alone] == [None, None, QUESTIONS[2], QUESTIONS[3]]


def _chromium_or_skip():
    """Playwright's sync API, or a skip naming what is missing (a failure under CI=true)."""
    missing = []
    if not Path(CHROMIUM).is_file():
        missing.append(f"chromium ({CHROMIUM}; scripts/install.sh installs it with apt-get)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("playwright (pip install -e '.[dev]')")
    if missing:
        if CI:
            pytest.fail("the browser test needs " + " and ".join(missing))
        pytest.skip("the browser test needs " + " and ".join(missing))
    return sync_playwright


def test_the_page_in_a_headless_browser(frontier):
    sync_playwright = _chromium_or_skip()
    report, paths = frontier
    cpt = report["rows"][1]
    url = paths["html"].resolve().as_uri()
    errors, requests = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.set_default_timeout(5000)
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url) if r.url != url else None)
            page.on("requestfailed", lambda r: requests.append(f"failed: {r.url}"))
            page.goto(url)
            page.wait_for_selector("#plot-cost .mark")
            # one mark per configuration that ran, in each plot; the router that did not run has none
            for plot in ("#plot-cost", "#plot-latency"):
                assert sorted(
                    page.locator(f"{plot} .mark").evaluate_all("els => els.map(e => e.getAttribute('data-label'))")
                ) == ["memorycpt", "rag"]
                assert page.locator(f"{plot} .mark .shape").count() == 2
            # hover: its label, F1 with interval, amortized and online USD, seconds
            assert page.locator("#tip").is_hidden()
            page.hover('#plot-cost .mark[data-label="memorycpt"] .shape')
            tip = page.inner_text("#tip")
            # F1 = mean(0.7, 0.7, 0.9, 0.5) = 0.7; its bootstrap interval as the report has it
            assert "memorycpt" in tip and f"F1 0.700 [{cpt['f1_low']:.3f}, {cpt['f1_high']:.3f}], n=4" in tip
            assert "1.5000 amortized C(n), 1.0000 online" in tip and "proxy s/q: 1.00" in tip
            assert "on the cost Pareto front" in tip
            page.hover('#plot-latency .mark[data-label="rag"] .shape')
            assert "rag" in page.inner_text("#tip") and "proxy s/q: 4.00" in page.inner_text("#tip")
            # the injected answer is text in its cell and ran nothing
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert HOSTILE in page.locator("#q-list td.ans").all_text_contents()
            assert page.locator("#q-list img").count() == 0
            # filter and toggle
            visible = "#q-list .q:not([hidden])"
            assert page.locator(visible).count() == 4 and page.inner_text("#q-count") == "4 of 4 questions"
            page.fill("#q-filter", "PET")  # case-insensitive, in the question text: q2
            assert page.locator(visible).count() == 1 and "Which pet?" in page.inner_text(visible)
            page.fill("#q-filter", "")
            page.check("#q-differ")  # q3: both 0.5
            assert page.inner_text("#q-count") == "3 of 4 questions"
            assert "When was the trip?" not in page.inner_text("#q-list")
            page.select_option("#q-order", "spread")  # q2 (spread 0.9) first
            assert page.locator(visible).first.locator(".id").inner_text().startswith("q2")
            # sort the configurations by F1: ascending puts rag (0.375) first, descending memorycpt
            first = "#frontier-table tbody tr:first-child td:first-child"
            page.click('#frontier-table th:has-text("F1 [95% CI]")')
            assert page.inner_text(first) == "rag"
            page.click('#frontier-table th:has-text("F1 [95% CI]")')
            assert page.inner_text(first) == "memorycpt"
            assert page.evaluate("typeof window.__pwned") == "undefined"
        finally:
            browser.close()
    assert errors == [] and requests == []
