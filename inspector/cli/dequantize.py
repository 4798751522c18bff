"""`pytree-inspector dequantize CKPT -o OUT`: every quantized weight written as its values.

    pytree-inspector dequantize Llama-3-FP8/ -o model-bf16.safetensors
    pytree-inspector dequantize gptq.safetensors -o model.safetensors --dtype float32

`inspector.dequantize(tree, dtype, out=OUT)`: each quantized weight (FP8 with its scales,
MXFP4, GPTQ, AWQ: `inspector.quant_groups`; a GGUF's `Q4_K`, `Q8_0`, ... tensors) is read,
dequantized by its jitted kernel and written before the next is read; the other leaves are
copied through. Weights that cannot be dequantized (a float8 weight with no scale, scales
that do not tile it) are left as stored and listed with their problems: exit status 1 then,
0 when every weight was dequantized.
"""

from __future__ import annotations

import time
from collections import Counter

from inspector.cli.output import (
    CLEAN,
    FINDING,
    Output,
    add_device,
    add_out_file,
    common_options,
    plural,
)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "dequantize", parents=[common_options()], help="write quantized weights as values",
        description="Dequantize every quantized weight of a checkpoint (FP8, MXFP4, GPTQ, AWQ, "
        "a GGUF's Q4_K, Q8_0, ...) into OUT, streamed one weight at a time, the other leaves "
        "copied through. Exit status 1 when some weights could not be dequantized (listed "
        "with their problems).")
    parser.add_argument("checkpoint", help="the checkpoint (file, model folder or URL)")
    add_out_file(parser)
    parser.add_argument("--dtype", default="bfloat16",
                        choices=("bfloat16", "float16", "float32"),
                        help="the dequantized weights' dtype (default bfloat16)")
    add_device(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    import inspector
    from inspector.cli.loading import load_or_fail
    from inspector.core.node_text import human_bytes
    from inspector.core.quant.dequantize import stored_counts

    start = time.perf_counter()
    tree = load_or_fail(args.checkpoint, out)
    groups = inspector.quant_groups(tree)
    done = [g for g in groups if g.usable]
    left = [g for g in groups if not g.usable]
    stored = stored_counts(tree)
    written = out.write_or_fail("dequantizing", args.out, lambda progress: inspector.dequantize(
        tree, args.dtype, device=args.device, out=args.out, progress=progress.rate))
    seconds = time.perf_counter() - start
    root = inspector.describe(written)[0]
    n_done = len(done) + stored.total()
    if out.json:
        for g in done + left:
            out.record("group", path=g.path, scheme=g.scheme, layout=g.layout,
                       dequantized=g.usable, shape=list(g.shape) if g.shape else None,
                       problems=list(g.problems))
        for kind, n in stored.items():
            out.record("stored", ggml_type=kind, count=n)
        out.record("summary", written=str(args.out), dtype=args.dtype, dequantized=n_done,
                   left=len(left), tensors=root.n_leaves, bytes=root.nbytes,
                   seconds=round(seconds, 3))
        return FINDING if left else CLEAN
    # one line per layout; a weight of its own only where something is to be said
    for layout, n in Counter(g.layout for g in done if not g.problems).items():
        out.line(f"dequantized {plural(n, 'weight')}: {layout}")
    for kind, n in stored.items():
        out.line(f"dequantized {plural(n, 'weight')}: {kind} (as the file's reader decodes it)")
    for g in done:
        if g.problems:
            out.line(f"dequantized {g.path}: {g.layout} ({'; '.join(g.problems)})")
    for g in left:
        out.line(f"{out.paint('left as stored', 'red')} {g.path}: {g.scheme}: "
                 f"{'; '.join(g.problems)}")
    tail = f", {len(left):,} left as stored" if left else ""
    out.line(f"wrote {args.out}: {plural(n_done, 'weight')} dequantized to "
             f"{args.dtype}{tail}; {root.n_leaves:,} tensors, "
             f"{human_bytes(root.nbytes)} in {seconds:.2f} s")
    return FINDING if left else CLEAN
