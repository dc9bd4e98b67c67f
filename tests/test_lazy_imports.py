"""Interactive commands start fast: building the CLI app and importing the public API load no
model runtime or server stack (torch, sentence-transformers, transformers, llama.cpp, FastAPI,
uvicorn, nltk); the embedder loads them on first encode."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ["torch", "sentence_transformers", "transformers", "llama_cpp", "fastapi", "uvicorn", "nltk", "sklearn"]


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}; import sys; print(' '.join(m for m in {HEAVY!r} if m in sys.modules) or '-')"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_cli_app_and_api_import_no_heavy_runtime():
    assert _loaded_after("from memfrontier.cli import app; import memfrontier.cli.memory") == ["-"]
    assert _loaded_after("import memfrontier.api; from memfrontier import Memory") == ["-"]


def test_embedder_construction_loads_no_model():
    assert _loaded_after(
        "from memfrontier.embed.minilm import MiniLMEmbedder; e = MiniLMEmbedder(); assert e.dim == 384"
    ) == ["-"]
