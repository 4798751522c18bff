"""`pytree-inspector convert SRC --to TARGET -o OUT`: a checkpoint ported onto another's layout.

    pytree-inspector convert bert.pt --to flax_params.msgpack -o ported.safetensors
    pytree-inspector convert bert.pt --to flax.safetensors -o out.safetensors --save-mapping m.json
    pytree-inspector convert bert.pt --to flax.safetensors --mapping m.json -o out.safetensors

`inspector.align` pairs each leaf of TARGET (its key paths, shapes and dtypes: no data read)
with a leaf of SRC and the transpose or reshape that fits (or `--mapping` applies a mapping
saved before, fixed by hand if need be, `Alignment.from_json`); `inspector.convert` then
streams the ported leaves into OUT (`.safetensors` or `.npz`), one leaf in memory at a time.
Targets left unmatched or ambiguous are listed and nothing is written (exit status 1), unless
`--allow-missing` leaves them out of OUT. Prints where it wrote and the time.
"""

from __future__ import annotations

import time
from pathlib import Path

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
        "convert", parents=[common_options()], help="port a checkpoint onto another's layout",
        description="Port SRC onto TARGET's key paths, layouts and dtypes: align the two trees "
        "(or apply a saved --mapping), list the target leaves left unmatched or ambiguous "
        "(exit status 1, nothing written, unless --allow-missing), and stream the converted "
        "tree into OUT.")
    parser.add_argument("source", metavar="SRC", help="the checkpoint the weights come from")
    parser.add_argument("--to", required=True, dest="target", metavar="TARGET",
                        help="a checkpoint of the layout to port onto (its shapes and dtypes "
                        "are read, not its values)")
    add_out_file(parser)
    parser.add_argument("--mapping", metavar="M.json",
                        help="a mapping saved with --save-mapping (or Alignment.to_json), "
                        "applied instead of aligning")
    parser.add_argument("--save-mapping", metavar="M.json",
                        help="write the mapping used as JSON (to review, fix and reuse)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="write what is paired; leave unmatched and ambiguous targets out")
    add_device(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    import inspector
    from inspector.cli.loading import load_or_fail

    start = time.perf_counter()
    source = load_or_fail(args.source, out)
    target = load_or_fail(args.target, out)
    try:
        if args.mapping:
            text = Path(args.mapping).read_text(encoding="utf-8")
            alignment = inspector.Alignment.from_json(text)
        else:
            alignment = inspector.align(source, target)
    except OSError as error:
        return out.fail(f"Cannot read the mapping {args.mapping}: {error.strerror or error}.")
    except inspector.InspectorError as error:  # not a mapping, or not of these trees
        return out.fail(str(error))
    if args.save_mapping:
        try:
            Path(args.save_mapping).write_text(alignment.to_json(), encoding="utf-8")
        except OSError as error:
            return out.fail(f"Cannot write {args.save_mapping}: {error.strerror or error}.")
        out.note(f"mapping written to {args.save_mapping}")
    _report(out, alignment)
    if not alignment.complete and not args.allow_missing:
        n = len(alignment.unmatched_target) + len(alignment.ambiguous)
        if out.json:
            out.record("summary", written=None, pairs=len(alignment.pairs), left=n)
        else:
            out.line(f"{plural(n, 'target leaf', 'target leaves')} without a single source: "
                     "nothing written. Fix the "
                     "mapping (--save-mapping, edit, --mapping) or pass --allow-missing.")
        return FINDING
    from inspector.core.node_text import human_bytes

    written = out.write_or_fail("converting", args.out, lambda progress: inspector.convert(
        source, alignment, allow_missing=args.allow_missing, device=args.device, out=args.out,
        progress=progress.rate))
    seconds = time.perf_counter() - start
    root = inspector.describe(written)[0]
    if out.json:
        out.record("summary", written=str(args.out), pairs=len(alignment.pairs),
                   left=len(alignment.unmatched_target) + len(alignment.ambiguous),
                   tensors=root.n_leaves, bytes=root.nbytes, seconds=round(seconds, 3))
    else:
        out.line(f"wrote {args.out}: {root.n_leaves:,} tensors, {human_bytes(root.nbytes)} "
                 f"in {seconds:.2f} s")
    return CLEAN


def _report(out: Output, alignment) -> None:
    """The pairs that changed layout, and every target left without a single source."""
    for p in alignment.pairs:
        if out.json:
            out.record("pair", target=p.target, source=p.source, transform=str(p.transform),
                       score=p.score, reason=p.reason)
    for path in alignment.unmatched_target:
        if out.json:
            out.record("unmatched", target=path)
        else:
            out.line(f"{out.paint('unmatched', 'red')}: {path}: no source leaf fits")
    for a in alignment.ambiguous:
        if out.json:
            out.record("ambiguous", target=a.target, candidates=list(a.candidates),
                       reason=a.reason)
        else:
            out.line(f"{out.paint('ambiguous', 'yellow')}: {a.target}: "
                     f"{', '.join(a.candidates)} ({a.reason})")
    if not out.json:
        moved = sum(1 for p in alignment.pairs if str(p.transform) != "none")
        out.line(f"aligned {plural(len(alignment.pairs), 'target leaf', 'target leaves')} "
                 f"({moved:,} with a layout change), {len(alignment.unmatched_target):,} "
                 f"unmatched, {len(alignment.ambiguous):,} ambiguous, "
                 f"{plural(len(alignment.unmatched_source), 'source leaf', 'source leaves')} "
                 "unused.")
