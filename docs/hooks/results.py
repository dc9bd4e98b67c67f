"""MkDocs hook: the results page is generated from the exported runs under ``results/``.

A line ``<!-- results: DIR -->`` in a page is replaced by ``results/DIR/frontier.md`` with its
"not run" and "started" rows (a configuration exported before it finished) left out, so the docs
show only numbers of finished runs that have files; a run refused for its fallbacks keeps its row,
which says why. A missing export is an
error (the build fails), never an empty table.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results"
MARKER = re.compile(r"^<!-- results: ([\w.-]+) -->$", re.M)


def frontier_table(name: str) -> str:
    """``results/NAME/frontier.md`` with its title demoted one level and its rows of configurations
    that did not run or have not finished dropped. Raises FileNotFoundError when the export is missing."""
    text = (RESULTS / name / "frontier.md").read_text("utf-8")
    out = []
    for line in text.splitlines():
        if re.match(r"^\| [^|]+ \| - \| (not run|started)", line):
            continue
        if line.startswith("#"):
            line = "#" + line
        out.append(line)
    return (
        "\n".join(out)
        + f"\n\nFiles: `results/{name}/` (per-configuration `summary.json` and `predictions.jsonl` under `configs/`).\n"
    )


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs hook signature)
    return MARKER.sub(lambda m: frontier_table(m.group(1)), markdown)
