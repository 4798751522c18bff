"""`inspector.align` of two LLM-like trees of about 100,000 leaves each (torch and Flax layouts).

    PYTHONPATH=. python benchmarks/bench_align.py [--layers 11111] [--repeats 3]

The torch side is a flat state dict (`model.layers.17.self_attn.q_proj.weight`, Linear
(out, in)); the Flax side nested dicts (`model/layers_17/self_attn/q_proj/kernel`, (in, out);
`input_layernorm/scale`). Leaves are `jax.ShapeDtypeStruct`s: align reads shapes and dtypes
only, so no memory is spent on values. Prints the seconds of each run and checks the result:
every target paired, every square kernel transposed.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

import inspector

_PROJ = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
         "mlp": ("gate_proj", "up_proj", "down_proj")}


def trees(layers: int, hidden: int = 64, inter: int = 256) -> tuple[dict, dict]:
    """(torch flat state dict, Flax nested params) of shapes, 9 leaves per layer + 4."""
    leaf = lambda *s: jax.ShapeDtypeStruct(s, np.float32)  # noqa: E731
    torch: dict = {"model.embed_tokens.weight": leaf(1000, hidden),
                   "model.norm.weight": leaf(hidden), "lm_head.weight": leaf(1000, hidden)}
    flax: dict = {"model": {"embed_tokens": {"embedding": leaf(1000, hidden)},
                            "norm": {"scale": leaf(hidden)}},
                  "lm_head": {"kernel": leaf(hidden, 1000)}}
    shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, hidden),
              "v_proj": (hidden, hidden), "o_proj": (hidden, hidden),
              "gate_proj": (inter, hidden), "up_proj": (inter, hidden),
              "down_proj": (hidden, inter)}
    for i in range(layers):
        layer = flax["model"][f"layers_{i}"] = {}
        for block, projs in _PROJ.items():
            for p in projs:
                out_dim, in_dim = shapes[p]
                torch[f"model.layers.{i}.{block}.{p}.weight"] = leaf(out_dim, in_dim)
                layer.setdefault(block, {})[p] = {"kernel": leaf(in_dim, out_dim)}
        for norm in ("input_layernorm", "post_attention_layernorm"):
            torch[f"model.layers.{i}.{norm}.weight"] = leaf(hidden)
            layer[norm] = {"scale": leaf(hidden)}
    return torch, {"params": flax}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=11_111)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ui", action="store_true",
                        help="also time the app's table of the alignment (server side)")
    args = parser.parse_args()
    source, target = trees(args.layers)
    n_s, n_t = len(jax.tree.leaves(source)), len(jax.tree.leaves(target))
    print(f"source {n_s:,} leaves, target {n_t:,} leaves")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for _ in range(args.repeats):
        # A reference in the same run (the machine may be shared): JAX flattening both trees
        # with their key paths, which `align` must at least match in work per leaf
        start = time.perf_counter()
        jax.tree_util.tree_flatten_with_path(source)
        jax.tree_util.tree_flatten_with_path(target)
        reference = time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        alignment = inspector.align(source, target)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"align: {seconds:.2f} s wall, {cpu:.2f} s CPU ({len(alignment.pairs):,} pairs, "
              f"{len(alignment.unmatched_target)} unmatched, {len(alignment.ambiguous)} "
              f"ambiguous); reference tree_flatten_with_path of both: {reference:.2f} s")
    assert alignment.complete and len(alignment.pairs) == n_t
    kernels = [p for p in alignment.pairs if p.target.endswith("['kernel']")]
    assert all(p.transform.perm == (1, 0) for p in kernels), "a kernel left untransposed"
    if args.ui:
        table_seconds(source, target)
    start = time.perf_counter()
    text = alignment.to_json()
    back = inspector.Alignment.from_json(text)
    print(f"to_json + from_json: {time.perf_counter() - start:.2f} s "
          f"({len(text) / 1e6:.1f} MB), equal: {back == alignment}")


def table_seconds(source, target) -> None:
    """The app's side of showing the alignment: the rows built (in the worker thread), then
    the paginated table given them on the event loop (it sends one page of 15 rows)."""
    from inspector.ui.align_view import AlignView
    from inspector.ui.session.align_state import align_state
    from inspector.ui.session.state import InspectorState

    state = InspectorState()
    view = AlignView(state)
    align = align_state(state)
    alignment = inspector.align(source, target)
    start = time.perf_counter()
    align._frame_of(alignment)
    rows = time.perf_counter() - start
    start = time.perf_counter()
    align.alignment = alignment
    shown = time.perf_counter() - start
    page = view.table._processed.iloc[:view.page_size]  # what the first page sends
    print(f"app table: rows built in {rows:.2f} s (worker thread), table updated in "
          f"{shown:.2f} s (event loop); first page {len(page)} rows, first row "
          f"{view.table.value['target'].iloc[0]}")


if __name__ == "__main__":
    main()
