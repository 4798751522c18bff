"""`pytree-inspector merge` against `mergekit-yaml` on the same YAML and files (issue 28's
merge target): whole commands, interleaved round by round, wall time and peak memory (RSS of
the process tree, from `wait4`'s `ru_maxrss` of the child).

mergekit is not a dependency of this project: install it in a side environment first, e.g.

    python3 -m venv /tmp/mk && /tmp/mk/bin/pip install torch==2.13.0
    /tmp/mk/bin/pip install mergekit
    PYTHONPATH=. .venv/bin/python benchmarks/bench_merge_mergekit.py \
        --mergekit /tmp/mk/bin/mergekit-yaml

The models: two GPT-2-medium-shaped float32 checkpoints (24 layers, n_embd 1024, vocabulary
50257: 355M parameters, 1.42 GB each; `--layers` makes them smaller) in model folders with a
`config.json` mergekit recognises (`GPT2LMHeadModel`), merged linearly with weights 0.5 / 0.5.
The two outputs are compared tensor by tensor (max |ours - mergekit's|).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIG = """merge_method: linear
models:
  - model: {a}
    parameters: {{weight: 0.5}}
  - model: {b}
    parameters: {{weight: 0.5}}
dtype: float32
"""


def gpt2(layers: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, v = 1024, 50257

    def w(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * 0.02

    out = {"transformer.wte.weight": w(v, d), "transformer.wpe.weight": w(1024, d),
           "transformer.ln_f.weight": w(d), "transformer.ln_f.bias": w(d)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        out.update({p + "attn.c_attn.weight": w(d, 3 * d), p + "attn.c_attn.bias": w(3 * d),
                    p + "attn.c_proj.weight": w(d, d), p + "attn.c_proj.bias": w(d),
                    p + "ln_1.weight": w(d), p + "ln_1.bias": w(d),
                    p + "ln_2.weight": w(d), p + "ln_2.bias": w(d),
                    p + "mlp.c_fc.weight": w(d, 4 * d), p + "mlp.c_fc.bias": w(4 * d),
                    p + "mlp.c_proj.weight": w(4 * d, d), p + "mlp.c_proj.bias": w(d)})
    return out


def model_folder(folder: Path, layers: int, seed: int) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    save_file(gpt2(layers, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": layers,
        "n_embd": 1024, "n_head": 16, "n_positions": 1024, "vocab_size": 50257}))


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (GB) of the command's largest process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return seconds, usage.ru_maxrss * 1024 / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mergekit", required=True, help="the mergekit-yaml executable")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        tmp = Path(tmp)
        model_folder(tmp / "a", args.layers, 1)
        model_folder(tmp / "b", args.layers, 2)
        size = (tmp / "a" / "model.safetensors").stat().st_size / 1e9
        config = tmp / "linear.yml"
        config.write_text(CONFIG.format(a=tmp / "a", b=tmp / "b"))
        ours_cmd = [sys.executable, "-m", "inspector", "merge", str(config), str(tmp / "ours"),
                    "--quiet"]
        theirs_cmd = [args.mergekit, str(config), str(tmp / "theirs"), "--lazy-unpickle",
                      "--allow-crimes", "--no-copy-tokenizer"]
        ours, theirs = [], []
        for _ in range(args.rounds):
            for out in ("ours", "theirs"):
                subprocess.run(["rm", "-rf", str(tmp / out)], check=True)
            ours.append(timed(ours_cmd))
            theirs.append(timed(theirs_cmd))
        from safetensors.numpy import load_file

        a = load_file(str(tmp / "ours" / "model.safetensors"))
        b = {}
        for f in sorted((tmp / "theirs").glob("*.safetensors")):
            b.update(load_file(str(f)))
        worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in b)
        missing = sorted(set(b) ^ set(a))
    print(f"two {size:.2f} GB float32 checkpoints ({args.layers} layers), linear 0.5/0.5, "
          f"{args.rounds} rounds interleaved, load average {os.getloadavg()[0]:.1f}")
    for name, runs in (("pytree-inspector merge", ours), ("mergekit-yaml", theirs)):
        secs = [s for s, _ in runs]
        print(f"  {name:24s} median {statistics.median(secs):6.2f} s "
              f"({min(secs):.2f}-{max(secs):.2f}), peak RSS {max(r for _, r in runs):.2f} GB")
    print(f"  outputs: max |ours - mergekit's| = {worst:.3g}; tensors in one only: {missing}")


if __name__ == "__main__":
    main()
