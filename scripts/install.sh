#!/usr/bin/env bash
# Creates .venv and installs memfrontier with all its extras and the dev tools (no step outside this
# script).
# llama-cpp-python compiles from source (minutes on two cores): its wheel is cached in
# $MEMFRONTIER_WHEELS (default ~/.cache/memfrontier/wheels) so later installs take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
LLAMA_VERSION=0.3.36
WHEELS=${MEMFRONTIER_WHEELS:-$HOME/.cache/memfrontier/wheels}
mkdir -p "$WHEELS"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip wheel
# The CPU build of torch, installed first so that pyproject.toml's torch range is already met (left
# to the resolver, the range would pull a multi-GB CUDA build).
.venv/bin/python -m pip install -q "torch==2.13.0"
if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $LLAMA_VERSION (one time, a few minutes)..."
  .venv/bin/python -m pip wheel -q --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi
# Every extra (serve, postgres, mcp, graph, train, ray, neo4j, otel, langgraph, agents, llamaindex) and the dev tools: the demo, the
# benchmarks and the whole test suite. `pip install .` alone is the light core (see pyproject.toml).
.venv/bin/python -m pip install -q --find-links "$WHEELS" -e ".[all,dev]"
# The browser of frontier.html's test (tests/test_frontier_html.py): Debian's chromium, driven by the
# dev extra's Playwright (never `playwright install`, which downloads a browser of its own). Only
# when it is missing, apt-get exists and we are root; without it the test skips (fails under CI=true).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "warning: chromium could not be installed; the browser test will skip (and fail under CI=true)" >&2
fi
.venv/bin/python -c "import llama_cpp, sentence_transformers, onnxruntime, bm25s, memfrontier"
# The embedder's ONNX graph (exported from the packaged MiniLM, checked against sentence-transformers,
# sha256-stamped) into ~/.cache/memfrontier/embed, so the first search does not pay for the export.
.venv/bin/python -m memfrontier.embed.minilm
touch .venv/.installed
