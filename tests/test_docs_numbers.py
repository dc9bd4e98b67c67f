"""Every number in the README's results tables and in the "Which memory should I use?" tables
(README and ``docs/which-memory.md``) is found in an exported file under ``results/``: a row of some
``results/*/frontier.json`` of a test-split run, printed rounded to as many decimals as the table shows.

A table row is matched against the configurations it names: the ``results/DIR/configs/LABEL/``
links in the row if any, else the backticked names of its first cell (or its first word), each
the configuration of that label, or every label that starts with ``NAME-`` when no label is
exactly ``NAME`` (``budgetmem`` -> ``budgetmem-capacity-high`` ...). A part of a cell that says
"LoCoMo" or "LongMemEval" (cells are split at ``;``) is matched only against that benchmark's
exports, as is a whole table whose header says so. Numbers are decimals (``0.370``,
``-0.098``); integers (``k=8``, ``40 questions``) and model names (``1.5B``) are not checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+(?![\w.])")
#: a word in the table -> the export folders' names hold this (``LongMemEval_S`` is its own benchmark:
#: its rows are not LongMemEval's oracle-file rows)
BENCHMARKS = {"locomo": "locomo-", "longmemeval_s": "lme-s-", "longmemeval": "lme-1"}


def exports() -> dict[tuple[str, str], dict]:
    """(results folder, configuration label) -> its frontier.json row, for rows that ran, of the
    exports the docs report: a training-split frontier (the strategy router's data) is not one."""
    out = {}
    for f in sorted(ROOT.glob("results/*/frontier.json")):
        doc = json.loads(f.read_text("utf-8"))
        if doc.get("run_options", {}).get("split") == "train":
            continue
        for row in doc["rows"]:
            if row.get("status") == "ok":
                out[(f.parent.name, row["label"])] = row
    return out


def tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """The markdown tables of ``text``: (header line, body rows as lists of cells)."""
    out, lines, i = [], text.splitlines(), 0
    while i + 1 < len(lines):
        if lines[i].startswith("|") and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            header, rows, i = lines[i], [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def section(text: str, title: str) -> str:
    """The text of the ``## title`` section (up to the next ``## ``)."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert m, f"no section '## {title}'"
    return m.group(1)


def benchmark_of(text: str) -> str | None:
    low = text.lower()
    low_without_s = low.replace("longmemeval_s", "")
    found = [part for word, part in BENCHMARKS.items() if word in (low_without_s if word == "longmemeval" else low)]
    return found[0] if len(found) == 1 else None


def configurations(row: list[str], found: dict) -> list[tuple[str, str]]:
    linked = re.findall(r"results/([\w.-]+)/configs/([\w.-]+)/", " ".join(row))
    if linked:
        return linked
    names = re.findall(r"`([\w-]+)`", row[0]) or [row[0].split()[0]]
    keys = []
    for name in names:
        exact = [k for k in found if k[1] == name]
        keys += exact or [k for k in found if k[1].startswith(name + "-")]
    return keys


def unmatched(text: str, found: dict) -> list[str]:
    """The numbers of the tables in ``text`` that no export of their row's configurations holds."""
    bad = []
    for header, rows in tables(text):
        table_bench = benchmark_of(header)
        for row in rows:
            keys = configurations(row, found)
            assert keys or not any(NUMBER.search(c) for c in row[1:]), f"row names no exported configuration: {row}"
            for cell in row[1:]:
                bench = table_bench
                for part in cell.split(";"):
                    bench = benchmark_of(part) or bench
                    values = [
                        v
                        for k, r in found.items()
                        if k in keys and (bench is None or bench in k[0])
                        for v in r.values()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)
                    ]
                    for printed in NUMBER.findall(part.replace("\u2212", "-")):
                        decimals = len(printed.split(".")[1])
                        if not any(f"{v:.{decimals}f}" == printed for v in values):
                            bad.append(f"{printed} in row {row[0]!r} ({part.strip()[:60]!r})")
    return bad


@pytest.fixture(scope="module")
def found():
    found = exports()
    assert {d for d, _ in found} == {
        "frontier-locomo-1.5b",
        "frontier-locomo-full-1.5b",
        "frontier-locomo-derived-1.5b",
        "frontier-lme-1.5b",
        "frontier-lme-s-1.5b",
        "frontier-lme-s-full-1.5b",
    }, sorted(found)
    return found


def test_readme_numbers_come_from_result_files(found):
    text = (ROOT / "README.md").read_text("utf-8")
    for title in ("Which memory should I use?", "Results"):
        part = section(text, title)
        assert tables(part), f"no table under '## {title}'"
        assert unmatched(part, found) == []


def test_which_memory_page_numbers_come_from_result_files(found):
    text = (ROOT / "docs" / "which-memory.md").read_text("utf-8")
    assert tables(text)
    assert unmatched(text, found) == []


def test_readme_evidence_links_point_at_exported_configurations():
    text = (ROOT / "README.md").read_text("utf-8")
    links = re.findall(r"\]\((results/[^)]+)\)", text)
    assert len(links) >= 4
    assert [link for link in links if not (ROOT / link).exists()] == []
    for link in links:
        if "/configs/" in link:
            assert (ROOT / link / "summary.json").is_file(), link


def test_a_number_without_a_file_is_caught(found):
    """The check itself: a changed digit, a number of another configuration and one of the other
    benchmark are each reported."""
    table = "| strategy | measured |\n|---|---|\n| `rag` | LoCoMo slice: F1 {} |\n"
    assert unmatched(table.format("0.370 [0.262, 0.480]"), found) == []
    assert len(unmatched(table.format("0.371"), found)) == 1
    assert len(unmatched(table.format("0.472"), found)) == 1  # oracle's F1, not rag's
    assert len(unmatched(table.format("0.403"), found)) == 1  # rag's F1 on LongMemEval
    assert unmatched(table.replace("LoCoMo", "LongMemEval").format("0.403"), found) == []


def test_the_results_page_shows_finished_rows_only(tmp_path, monkeypatch):
    """The docs' results hook keeps the rows with numbers and drops the configurations that did not
    run or, exported before they finished, only started."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("results_hook", ROOT / "docs" / "hooks" / "results.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "frontier.md").write_text(
        "# frontier\n\n| configuration | n | F1 |\n|---|---|---|\n| rag | 40 | 0.370 |\n"
        "| automem | - | started: 12 questions answered | |\n| longctx | - | not run yet | |\n"
    )
    monkeypatch.setattr(hook, "RESULTS", tmp_path)
    page = hook.on_page_markdown("<!-- results: f -->", None, None, None)
    assert "| rag | 40 | 0.370 |" in page and "## frontier" in page
    assert "automem" not in page and "longctx" not in page
    with pytest.raises(FileNotFoundError):
        hook.frontier_table("missing")


def test_the_docs_count_the_shipped_specs_configurations():
    from memfrontier.frontier.spec import load_spec

    n = len(load_spec(None).configurations)
    assert f"every\nconfiguration ({n}) on all 314" in (ROOT / "docs" / "frontier.md").read_text("utf-8")
    assert f"the shipped spec, {n} configurations x 314" in (ROOT / "docs" / "reproduce.md").read_text("utf-8")
