"""`pytree-inspector diff A B`: every difference between two checkpoints; exit 1 if any.

    pytree-inspector diff release.safetensors candidate.safetensors
    pytree-inspector diff a.safetensors b.safetensors --values --rtol 1e-3 --json

Structure (missing, extra, shape, dtype, container type) from headers alone, each with its
key path, as `inspector.diff` gives them; with `--values`, the leaves that match in shape are
read and compared too (max |a-b|, relative L2, cosine, share of elements changed beyond
`atol + rtol |b|`), which is the only case that imports JAX.
"""

from __future__ import annotations

from inspector.cli.output import CLEAN, FINDING, Output, common_options, finite

_COLOURS = {"missing": "red", "extra": "green", "shape": "yellow", "dtype": "yellow",
            "type": "yellow", "value": "magenta"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "diff", parents=[common_options()], help="list every difference between two trees",
        description="List every difference between two checkpoints, each with its key path: "
        "missing, extra, shape, dtype and container-type differences (headers only), and with "
        "--values the value figures of every leaf that differs. Exit status 1 when they "
        "differ, 0 when they agree.")
    parser.add_argument("a", help="the expected checkpoint (file, folder or URL)")
    parser.add_argument("b", help="the candidate checkpoint")
    parser.add_argument("--values", action="store_true",
                        help="also read and compare the values of leaves of equal shape")
    parser.add_argument("--rtol", type=float, default=None, metavar="R",
                        help="with --values: relative tolerance of 'changed' (default 1e-5)")
    parser.add_argument("--atol", type=float, default=None, metavar="A",
                        help="with --values: absolute tolerance of 'changed' (default 1e-8)")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    if not args.values and (args.rtol is not None or args.atol is not None):
        return out.fail("--rtol and --atol apply to value differences: add --values.")
    import inspector
    from inspector.cli.loading import load_or_fail
    from inspector.core.tolerance import ATOL, RTOL

    a = load_or_fail(args.a, out)
    b = load_or_fail(args.b, out)
    rtol = RTOL if args.rtol is None else args.rtol
    atol = ATOL if args.atol is None else args.atol
    try:
        with out.progress("comparing values") as progress:
            found = inspector.diff(a, b, values=args.values, rtol=rtol, atol=atol,
                                   progress=progress if args.values else None)
    except inspector.InspectorError as error:  # a leaf's data turned out unreadable
        return out.fail(str(error))
    counts: dict[str, int] = {}
    for d in found:
        counts[d.kind] = counts.get(d.kind, 0) + 1
        if out.json:
            out.record("difference", path=d.path, kind=d.kind, a=d.a, b=d.b,
                       **({} if d.kind != "value" else dict(
                           max_abs=finite(d.max_abs), rel_l2=finite(d.rel_l2),
                           cosine=finite(d.cosine), frac_changed=finite(d.frac_changed))))
        else:
            where = d.path or "(root)"
            rest = str(d)[len(where) + 2:]  # `Difference.__str__` is "<path>: <what>"
            out.line(f"{out.paint(where, 'bold')}: {out.paint(rest, _COLOURS[d.kind])}"
                     if out.colour else str(d))
    if out.json:
        out.record("summary", differences=len(found), kinds=counts, a=str(args.a),
                   b=str(args.b), values=args.values)
    elif found:
        kinds = ", ".join(f"{n:,} {kind}" for kind, n in counts.items())
        out.line(f"{len(found):,} difference(s) ({kinds}).")
    else:
        what = "structure and values" if args.values else "structure"
        out.line(f"No differences: the {what} {'agree' if args.values else 'agrees'}.")
    return FINDING if found else CLEAN

