"""Loading the packaged Gemma 3 270M GGUF through transformers: ``load_causal_lm`` (the GGUF
header parsed once) against the plain transformers calls it makes (tokenizer, then model: the
header parsed once by each, three times in all), each in a fresh process, in the same run.

Prints the seconds of each load, the ratio, and checks that both give the same tokenizer output
and the same weights (a checksum over every parameter).

    .venv/bin/python benchmarks/bench_hf_load.py [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch
mode = sys.argv[1]
t0 = time.perf_counter()
if mode == "memfrontier":
    from memfrontier.llm.hf import load_causal_lm
    lm, tok = load_causal_lm(None)
else:
    import os
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from memfrontier.llm.embedded import default_model_path
    folder, name = os.path.split(default_model_path())
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    lm = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                              quantization_config=GgufConfig(gguf_file=name, dequantize=True))
secs = time.perf_counter() - t0
with torch.no_grad():
    checksum = float(sum(p.double().sum() for p in lm.parameters()))
ids = tok("Evan bought a blue Prius in May 2023.")["input_ids"]
print(json.dumps({"seconds": secs, "checksum": checksum, "ids": ids}))
"""


def load(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    best: dict[str, dict] = {}
    for _ in range(args.repeats):
        for mode in ("transformers", "memfrontier"):
            r = load(mode)
            if mode not in best or r["seconds"] < best[mode]["seconds"]:
                best[mode] = r
    a, b = best["transformers"], best["memfrontier"]
    if (a["checksum"], a["ids"]) != (b["checksum"], b["ids"]):
        raise SystemExit(f"different models: {a['checksum']} / {b['checksum']}, {a['ids']} / {b['ids']}")
    print(f"plain transformers calls: {a['seconds']:.1f} s")
    print(
        f"load_causal_lm:           {b['seconds']:.1f} s  ({a['seconds'] / b['seconds']:.2f}x faster; "
        f"same weights, checksum {b['checksum']:.6g}, same token ids)"
    )


if __name__ == "__main__":
    main()
