"""`pytree-inspector dequantize CKPT -o OUT`: every quantized weight written as its values.

    pytree-inspector dequantize Llama-3-FP8/ -o model-bf16.safetensors
    pytree-inspector dequantize gptq.safetensors -o model.safetensors --dtype float32

`inspector.dequantize(tree, dtype, out=OUT)`: each quantized weight (FP8 with its scales,
MXFP4, GPTQ, AWQ: `inspector.quant_groups`) is read, dequantized by its jitted kernel and
written before the next is read; the other leaves are copied through. Weights that cannot be
dequantized (a float8 weight with no scale, scales that do not tile it) are left as stored and
listed with their problems: exit status 1 then, 0 when every weight was dequantized.
"""

from __future__ import annotations

import time

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
        description="Dequantize every quantized weight of a checkpoint (FP8, MXFP4, GPTQ, AWQ) "
        "into OUT, streamed one weight at a time, the other leaves copied through. Exit status "
        "1 when some weights could not be dequantized (listed with their problems).")
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

    start = time.perf_counter()
    tree = load_or_fail(args.checkpoint, out)
    groups = inspector.quant_groups(tree)
    done = [g for g in groups if g.usable]
    left = [g for g in groups if not g.usable]
    written = out.write_or_fail("dequantizing", args.out, lambda progress: inspector.dequantize(
        tree, args.dtype, device=args.device, out=args.out, progress=progress.rate))
    seconds = time.perf_counter() - start
    root = inspector.describe(written)[0]
    for g in done + left:
        if out.json:
            out.record("group", path=g.path, scheme=g.scheme, layout=g.layout,
                       dequantized=g.usable, shape=list(g.shape) if g.shape else None,
                       problems=list(g.problems))
        elif g.usable:
            extra = f" ({'; '.join(g.problems)})" if g.problems else ""
            out.line(f"dequantized {g.path}: {g.layout}{extra}")
        else:
            out.line(f"{out.paint('left as stored', 'red')} {g.path}: {g.scheme}: "
                     f"{'; '.join(g.problems)}")
    if out.json:
        out.record("summary", written=str(args.out), dtype=args.dtype, dequantized=len(done),
                   left=len(left), tensors=root.n_leaves, bytes=root.nbytes,
                   seconds=round(seconds, 3))
    else:
        tail = f", {len(left):,} left as stored" if left else ""
        out.line(f"wrote {args.out}: {plural(len(done), 'weight')} dequantized to "
                 f"{args.dtype}{tail}; {root.n_leaves:,} tensors, "
                 f"{human_bytes(root.nbytes)} in {seconds:.2f} s")
    return FINDING if left else CLEAN
