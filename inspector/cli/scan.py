"""`pytree-inspector scan CKPT`: every leaf's NaN/Inf counts, range, moments and norms.

    pytree-inspector scan ckpt_50000.safetensors              # the table, then a summary
    pytree-inspector scan ckpt_50000.safetensors --nonfinite  # only the leaves with NaN/Inf
    pytree-inspector scan ckpt.safetensors --json | jq 'select(.nan > 0)'

`inspector.scan` of the loaded checkpoint (lazy leaves, read a chunk at a time): per leaf its
path, dtype, shape, NaN and Inf counts, and min, max, mean, std, l2, max |x| over the finite
elements, and the zeros. Exit status 1 when any leaf holds a NaN or an Inf.
"""

from __future__ import annotations

from inspector.cli.output import CLEAN, FINDING, Output, add_device, common_options, finite

COLUMNS = ("path", "dtype", "shape", "nan", "inf", "min", "max", "mean", "std", "l2",
           "max_abs", "zeros")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "scan", parents=[common_options()], help="NaN/Inf counts, ranges and norms per leaf",
        description="Scan every leaf of a checkpoint: NaN and Inf counts, min, max, mean, "
        "std, l2 and max |x| over the finite elements, and zeros; a summary line last. Exit "
        "status 1 when any NaN or Inf is found, 0 when none.")
    parser.add_argument("checkpoint", help="the checkpoint (file, model folder or URL)")
    parser.add_argument("--nonfinite", action="store_true",
                        help="list only the leaves holding NaN or Inf")
    add_device(parser, "the reductions run")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    import inspector
    from inspector.cli.loading import load_or_fail

    tree = load_or_fail(args.checkpoint, out)
    try:
        with out.progress("scanning") as progress:
            found = inspector.scan(tree, device=args.device, progress=progress)
    except inspector.InspectorError as error:  # a leaf's data is unreadable, a bad device
        return out.fail(str(error))
    bad = found.nonfinite()
    shown = bad if args.nonfinite else found.leaves
    if out.json:
        for s in shown:
            out.record("leaf", path=s.path, dtype=s.dtype, shape=list(s.shape or ()),
                       size=s.size, nan=s.nan, posinf=s.posinf, neginf=s.neginf,
                       min=finite(s.min), max=finite(s.max), mean=finite(s.mean),
                       std=finite(s.std), l2=finite(s.l2), max_abs=finite(s.max_abs),
                       zeros=s.zeros)
        out.record("summary", checkpoint=str(args.checkpoint), leaves=len(found.leaves),
                   skipped=list(found.skipped), nonfinite_leaves=[s.path for s in bad],
                   nan=sum(s.nan for s in bad), inf=sum(s.posinf + s.neginf for s in bad),
                   params=sum(s.size for s in found.leaves), seconds=round(found.seconds, 3))
    else:
        if shown:
            _table(out, shown)
        out.line(summary(found, bad))
    return FINDING if bad else CLEAN


def _table(out: Output, leaves) -> None:
    rows = [(s.path, s.dtype, "x".join(map(str, s.shape or ())) or "()", f"{s.nan:,}",
             f"{s.posinf + s.neginf:,}", num(s.min), num(s.max), num(s.mean), num(s.std),
             num(s.l2), num(s.max_abs), f"{s.zeros:,}") for s in leaves]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]

    def fmt(cells) -> str:
        parts = [c.ljust(w) if i < 3 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    out.line(out.paint(fmt(COLUMNS), "bold"))
    for s, row in zip(leaves, rows, strict=True):
        text = fmt(row)
        out.line(out.paint(text, "red") if s.nonfinite else text)


def summary(found, bad) -> str:
    """`12 leaves (1,234 params) scanned in 0.05 s: 1 with NaN/Inf (3 NaN, 1 Inf): ['w'].`"""
    params = sum(s.size for s in found.leaves)
    head = f"{len(found.leaves):,} leaves ({params:,} params) scanned in {found.seconds:.2f} s"
    if found.skipped:
        head += f", {len(found.skipped):,} not numeric (skipped)"
    if not bad:
        return head + ": no NaN or Inf."
    nan = sum(s.nan for s in bad)
    inf = sum(s.posinf + s.neginf for s in bad)
    names = ", ".join(s.path for s in bad[:5]) + (", ..." if len(bad) > 5 else "")
    return f"{head}: {len(bad):,} with NaN/Inf ({nan:,} NaN, {inf:,} Inf): {names}."


def num(x: float) -> str:
    """A figure in a table cell: 4 significant digits (`nan` where there is none)."""
    return f"{x:.4g}"
