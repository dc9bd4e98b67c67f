"""The documentation's examples run: every fenced ``python`` and ``bash`` block of the pages in
``DOCS`` is executed against the embedded default models, so an example that stops working fails
the suite.

How a page's blocks run
  Each page gets one temp directory (its working directory: the pages' relative paths such as
  ``mem/`` and ``runs/rag`` land there) and its blocks run there in page order, so a later block
  sees what an earlier one stored. ``chat.jsonl`` (the README's "one JSON message per line") is
  written there first (``CHAT``). A ``python`` block runs as a script with this interpreter; a
  ``bash`` block runs line by line (``\\``-continued lines joined) with ``bash -c``, each line's
  ``.venv/bin/memfrontier`` replaced by this environment's console script. Every line and
  script must exit 0. The checkout's ``src/`` comes first on ``PYTHONPATH``.

Markers (HTML comments, invisible on the rendered page; the reader still sees the command)
  ``<!-- example: skip (REASON) -->`` on the lines just before a block: the block is not run.
  ``<!-- example: skip-line TEXT (REASON) -->`` (as many as needed) just before a block: the
  lines of that block containing TEXT are not run.
  Only ``python`` and ``bash`` blocks are examples (``json``, ``text``, plain blocks are not run).
  A reason is required; a misspelt marker, one that is not followed by an example block (blank
  lines aside) or whose TEXT matches no line fails, and so does any unmarked block that does not
  run: nothing is skipped silently.

What this module changes in a command, explicitly
  ``SUBSTITUTIONS``: (page, the line's text, old, new, why); each one must apply to some line.
  ``{name}`` in ``new`` is a value captured from an earlier line's output (``CAPTURES``: the key
  ``keys create`` printed) or set here (``{port}``: a free port, so parallel runs do not collide).
  ``WRITES``: files a line must have written (those the page names).
  ``BACKGROUND``: lines that start a server; they run in the background, the test waits until
  the server answers ``/healthz``, and the server is stopped (SIGTERM) after the page's blocks.
  ``eval`` reads a two-session slice of LoCoMo's conv-49 (``MEMFRONTIER_DATA``) and answers
  1 question instead of 40 (a substitution below), so the whole module takes minutes, not hours.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memfrontier.eval.datasets import data_root

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    "README.md",
    "docs/getting-started.md",
    "docs/python.md",
    "docs/service.md",
    "docs/integrations/opentelemetry.md",
    "docs/integrations/langgraph.md",
    "docs/integrations/openai-agents.md",
    "docs/integrations/llamaindex.md",
]
CLI = str(Path(sys.executable).with_name("memfrontier"))
TIMEOUT_S = 600

# The README's CLI quick start: one message per line, {"role", "content", "speaker"?, "timestamp"?, "session_id"?}.
CHAT = [
    {
        "role": "user",
        "content": "I started as a nurse at St. Mary's in March.",
        "speaker": "Ana",
        "timestamp": "2024-03-02T09:00:00",
        "session_id": "s1",
    },
    {
        "role": "assistant",
        "content": "Congratulations on the new job!",
        "timestamp": "2024-03-02T09:00:20",
        "session_id": "s1",
    },
    {
        "role": "user",
        "content": "I left St. Mary's; I teach biology at Lincoln High now.",
        "speaker": "Ana",
        "timestamp": "2024-09-10T18:30:00",
        "session_id": "s2",
    },
    {"role": "assistant", "content": "How are your students?", "timestamp": "2024-09-10T18:30:30", "session_id": "s2"},
]

SUBSTITUTIONS = [
    (
        "README.md",
        "eval --strategy rag --limit 40",
        "--limit 40",
        "--limit 1",
        "a benchmark run of 40 questions takes minutes on two cores",
    ),
    (
        "docs/getting-started.md",
        "eval --dataset locomo",
        "--limit 40",
        "--limit 1",
        "a benchmark run of 40 questions takes minutes on two cores",
    ),
    ("docs/service.md", "serve --data-dir srv/", "--port 8000", "--port {port}", "a free port: port 8000 may be taken"),
    ("docs/service.md", "keys revoke", "<id>", "{key_id}", "the id `keys create` printed"),
    (
        "docs/service.md",
        "MemoryClient(",
        "http://127.0.0.1:8000",
        "http://127.0.0.1:{port}",
        "the port the server was started on",
    ),
    ("docs/service.md", "MemoryClient(", '"mf_..."', '"{api_key}"', "the key `keys create` printed"),
]
# (page, the line's text, regex over its stdout; its named groups become {names})
CAPTURES = [("docs/service.md", "keys create acme", r"(?P<api_key>mf_(?P<key_id>[0-9a-f]+)_\S+)")]
# (page, the line's text, files the page says it writes, relative to the page's directory)
WRITES = [("docs/getting-started.md", "--out runs/rag", ["runs/rag/summary.json", "runs/rag/predictions.jsonl"])]
# (page, the line's text): started in the background, awaited on http://127.0.0.1:{port}/healthz
BACKGROUND = [("docs/service.md", "memfrontier serve ")]

READS_DATA = re.compile(r"memfrontier (eval|frontier) ")  # blocks that read the benchmark data
MARKER = re.compile(r"^<!-- example: (skip|skip-line) (.*?)\s*-->$")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None = None  # the reason, when the whole block is marked
    skip_lines: list[tuple[str, str]] = field(default_factory=list)  # (TEXT, reason)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def parse_marker(arg: str) -> tuple[str, str]:
    """``'TEXT (REASON)'`` -> (TEXT, REASON); ``'(REASON)'`` -> ('', REASON). No reason: ValueError."""
    m = re.fullmatch(r"(.*?)\s*\((.+)\)", arg)
    if not m or not m.group(2).strip():
        raise ValueError(f"marker without a (reason): {arg!r}")
    return m.group(1).strip(), m.group(2).strip()


def blocks_of(page: str, text: str | None = None) -> list[Block]:
    """The fenced ``python``/``bash`` blocks of ``page`` (its file, or ``text``) with their markers.
    A marker not followed (blank lines and other markers aside) by a python/bash block, or
    without a reason, raises ValueError."""
    lines = (text if text is not None else (ROOT / page).read_text("utf-8")).splitlines()
    out: list[Block] = []
    pending: list[tuple[int, str, str]] = []  # (line, kind, arg)
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.strip().startswith("<!-- example:"):
            if not (m := MARKER.match(text.strip())):
                raise ValueError(f"{page}:{i + 1}: not an example marker: {text.strip()!r}")
            pending.append((i + 1, m.group(1), m.group(2)))
            i += 1
            continue
        if m := FENCE.match(text):
            lang, start, body = m.group(1), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
            if lang in ("python", "bash"):
                b = Block(page, start, lang, "\n".join(body) + "\n")
                for _, kind, arg in pending:
                    what, why = parse_marker(arg)
                    if kind == "skip":
                        b.skip = why
                    elif not what:
                        raise ValueError(f"{page}:{start}: skip-line without TEXT")
                    else:
                        b.skip_lines.append((what, why))
                out.append(b)
                pending = []
            elif pending:
                raise ValueError(f"{page}:{pending[0][0]}: example marker before a {lang or 'plain'} block")
            continue
        if pending and text.strip():
            raise ValueError(f"{page}:{pending[0][0]}: example marker not followed by a block")
        i += 1
    if pending:
        raise ValueError(f"{page}:{pending[0][0]}: example marker at the end of the page")
    return out


def shell_lines(code: str) -> list[str]:
    """The commands of a bash block: ``\\``-continued lines joined, blank and comment lines dropped."""
    out, cur = [], ""
    for raw in code.splitlines():
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1] + " "
            continue
        cur += raw
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    return out


ALL_BLOCKS = [b for page in DOCS for b in blocks_of(page)]
RUNNABLE = [b for b in ALL_BLOCKS if b.skip is None]


def test_the_pages_have_examples_and_every_marker_has_a_reason():
    """Every page listed has examples; a skip-line marker matches a line of its block; every
    substitution, capture and background entry applies to some line (a stale entry fails)."""
    assert {b.page for b in ALL_BLOCKS} == set(DOCS)
    for b in ALL_BLOCKS:
        for what, _ in b.skip_lines:
            assert any(what in line for line in b.code.splitlines()), f"{b.id}: skip-line {what!r} matches no line"
    for page, where, old, *_ in SUBSTITUTIONS:
        assert any(where in line and old in line for b in RUNNABLE if b.page == page for line in b.code.splitlines()), (
            f"substitution {old!r} in {page} ({where!r}) matches no line of a block that runs"
        )
    for page, where, *_ in CAPTURES + BACKGROUND + WRITES:
        assert any(where in line for b in RUNNABLE if b.page == page for line in b.code.splitlines()), (
            f"{page}: {where!r} matches no line of a block that runs"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PageRun:
    """One page's working directory, captured values and background servers."""

    page: str
    cwd: Path
    env: dict
    values: dict
    servers: list = field(default_factory=list)

    def substitute(self, line: str) -> str:
        for page, where, old, new, _ in SUBSTITUTIONS:
            if page == self.page and where in line and old in line:
                line = line.replace(old, new.format(**self.values))
        return line

    def capture(self, line: str, stdout: str) -> None:
        for page, where, pattern in CAPTURES:
            if page == self.page and where in line:
                m = re.search(pattern, stdout)
                assert m, f"{where!r}: no {pattern!r} in its output:\n{stdout}"
                self.values.update(m.groupdict())

    def stop(self) -> None:
        for proc in self.servers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory, locomo_slice):
    runs: dict[str, PageRun] = {}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    if (data_root() / "locomo" / "locomo10.json").is_file():  # else the blocks that read it are skipped (conftest)
        env["MEMFRONTIER_DATA"] = str(locomo_slice("conv-49"))

    def get(page: str) -> PageRun:
        if page not in runs:
            cwd = tmp_path_factory.mktemp(Path(page).stem)
            (cwd / "chat.jsonl").write_text("".join(json.dumps(m) + "\n" for m in CHAT), "utf-8")
            runs[page] = PageRun(page, cwd, env, {"port": free_port()})
        return runs[page]

    yield get
    for r in runs.values():
        r.stop()


def run_checked(args: list[str], run: PageRun, what: str) -> str:
    p = subprocess.run(args, check=False, cwd=run.cwd, env=run.env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode == 0, (
        f"{what} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
    )
    return p.stdout


def start_server(line: str, run: PageRun) -> None:
    with open(run.cwd / "server.log", "w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            ["bash", "-c", "exec " + line],
            cwd=run.cwd,
            env=run.env,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    run.servers.append(proc)
    url = f"http://127.0.0.1:{run.values['port']}/healthz"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, (
            f"{line!r} exited {proc.returncode}:\n{(run.cwd / 'server.log').read_text()[-3000:]}"
        )
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{line!r}: no answer on {url} within 180 s:\n{(run.cwd / 'server.log').read_text()[-3000:]}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[pytest.mark.data] if READS_DATA.search(b.code) else []) for b in RUNNABLE],
    ids=[b.id for b in RUNNABLE],
)
def test_example_runs(block: Block, page_runs):
    """The block exits 0 (each line, for bash) in its page's directory. ``ask`` loads the embedded
    LLM (slow); a block with an ``eval`` line reads the LoCoMo slice (marked data)."""
    run = page_runs(block.page)
    if block.lang == "python":
        code = "\n".join(run.substitute(line) for line in block.code.splitlines()) + "\n"
        script = run.cwd / f"example_{block.line}.py"
        script.write_text(code, "utf-8")
        run_checked([sys.executable, str(script)], run, f"{block.id} (python)")
        return
    for line in shell_lines(block.code):
        if any(what in line for what, _ in block.skip_lines):
            continue
        cmd = run.substitute(line).replace(".venv/bin/memfrontier", CLI)
        if any(page == block.page and where in line for page, where in BACKGROUND):
            start_server(cmd, run)
            continue
        run.capture(line, run_checked(["bash", "-c", cmd], run, f"{block.id}: {line!r}"))
        for page, where, files in WRITES:
            if page == block.page and where in line:
                assert [f for f in files if not (run.cwd / f).is_file()] == [], f"{line!r} did not write them"


def test_markers_and_lines_are_read_as_documented():
    page = (
        "<!-- example: skip (needs a GPU) -->\n```bash\nmake gpu\n```\n\n"
        "<!-- example: skip-line serve (runs until ctrl-c) -->\n\n"
        "```bash\na --x \\\n  --y   # joined\n# a comment\nserve --port 1\n```\n"
        "```python\nprint(1)\n```\n```json\n{}\n```\n"
    )
    gpu, shell, py = blocks_of("p.md", page)
    assert (gpu.skip, gpu.line, shell.skip, shell.skip_lines, py.lang, py.line) == (
        "needs a GPU",
        2,
        None,
        [("serve", "runs until ctrl-c")],
        "python",
        14,
    )
    assert shell_lines(shell.code) == ["a --x    --y   # joined", "serve --port 1"]
    for bad in (
        "<!-- example: skip -->\n```bash\nx\n```",  # no reason
        "<!-- example: skip (why) -->\n```json\n{}\n```",  # not an example block
        "<!-- example: skip (why) -->\ntext\n```bash\nx\n```",  # not just before the block
        "<!-- example: skip (why) -->\n",  # at the end
        "<!-- example: skipp (why) -->\n```bash\nx\n```",  # a misspelt marker
    ):
        with pytest.raises(ValueError):
            blocks_of("p.md", bad)
