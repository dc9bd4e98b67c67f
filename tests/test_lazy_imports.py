"""Interactive commands start fast: building the CLI app and importing the public API load no
model runtime or server stack (torch, sentence-transformers, transformers, llama.cpp, FastAPI,
uvicorn, nltk); adding and searching memories loads ONNX Runtime and no torch, transformers,
scikit-learn, scipy.stats or pandas (nltk's stemmer is imported without its optional probes)."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ["torch", "sentence_transformers", "transformers", "llama_cpp", "fastapi", "uvicorn", "nltk", "sklearn"]


def _loaded_after(code: str, extra: list[str] = ()) -> list[str]:
    names = HEAVY + [m for m in extra if m not in HEAVY]
    probe = f"{code}; import sys; print(' '.join(m for m in {names!r} if m in sys.modules) or '-')"
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


def test_add_and_search_run_without_torch_or_the_scientific_stack(tmp_path):
    # the ONNX graph is exported once per cache (that process imports torch); scripts/install.sh does it
    out = subprocess.run(
        [sys.executable, "-m", "memfrontier.embed.minilm"], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    store = str(tmp_path / "store")
    code = (
        "from memfrontier import Memory; m = Memory.open(" + repr(store) + "); "
        "m.add([{'role': 'user', 'content': 'I moved to Lisbon in March.'}], user_id='ana'); "
        "hits = m.search('where does Ana live', user_id='ana', k=1); assert 'Lisbon' in hits[0].chunk.text, hits; "
        "m.close()"
    )
    loaded = _loaded_after(code, extra=["scipy.stats", "pandas", "onnxruntime"])
    # the embedder's runtime and the stemmer; nothing of torch, transformers, sklearn, scipy.stats, pandas
    assert loaded == ["nltk", "onnxruntime"]
