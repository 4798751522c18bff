"""`pytree-inspector check CKPT_OR_INDEX`: what is wrong with a checkpoint's files.

    pytree-inspector check model.safetensors.index.json   # shards against their index
    pytree-inspector check ./Llama-3-FP8/                  # a model folder: its index or file
    pytree-inspector check download.safetensors --json

Three kinds of problem, each with the tensor's key path or the file's name:

- `index`: a sharded checkpoint's index against its shards (`inspector.check_index`: missing
  or damaged shards, tensors missing, stray, duplicated, stray files, a dtype mix);
- `quant`: every quantized weight with a problem (`inspector.quant_groups`: a float8 weight
  with no scale, a scale with no weight, scales that do not tile the weight, members split
  across shards);
- `refused`: the file is refused by `inspector.load` as damaged or hostile (a header that
  lies about its offsets, a size past the limits, a pickle that runs code): the library's
  message.

Exit statuses: 1 when any problem is found (a refused file included: the file is at fault,
and saying so is the check's job); 0 when none; 2 when the check itself cannot run: a path
that does not exist, a bad argument, a folder with no single checkpoint to pick, a missing
format library.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from inspector.cli.output import CLEAN, FINDING, Output, common_options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", parents=[common_options()], help="index, quantization and file problems",
        description="Check a checkpoint: a sharded index against its shards, every quantized "
        "weight's members (orphan codes or scales, scales that do not fit, members split "
        "across shards), and whether the file is refused as damaged or hostile. Exit status "
        "1 when any problem is found, 0 when none, 2 when the path does not exist or the "
        "arguments are wrong.")
    parser.add_argument("checkpoint", metavar="CKPT_OR_INDEX",
                        help="a checkpoint file, a *.safetensors.index.json, a model folder, "
                        "or a URL")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    import inspector
    from inspector.cli.loading import checkpoint_path_or_fail
    from inspector.core.errors import MissingDependencyError
    from inspector.core.quant.dequantize import stored_counts
    from inspector.io.locate import is_url

    path = args.checkpoint
    if not is_url(path) and not Path(path).exists():
        return out.fail(f"Cannot check {path}: the path does not exist.")
    path = checkpoint_path_or_fail(path, out)  # a folder of several files and no index: 2
    problems: list[dict] = []
    tree = None
    try:
        if str(path).endswith(".index.json"):
            problems += [dict(source="index", kind=p.kind, path=p.path, detail=p.detail)
                         for p in inspector.check_index(path)]
        tree = inspector.load(path)
    except MissingDependencyError as error:  # the environment, not the file
        return out.fail(str(error))
    except inspector.InspectorError as error:
        problems.append(dict(source="refused", kind="refused", path=str(path),
                             detail=str(error)))
    groups = [] if tree is None else inspector.quant_groups(tree)
    problems += [dict(source="quant", kind=g.scheme, path=g.path, detail="; ".join(g.problems))
                 for g in groups if g.problems]
    counts: dict[str, int] = {}
    for p in problems:
        counts[p["source"]] = counts.get(p["source"], 0) + 1
        if out.json:
            out.record("problem", **p)
        else:
            out.line(_line(out, p))
    n_leaves = None if tree is None else inspector.describe(tree)[0].n_leaves
    # a GGUF's quantized tensors: one leaf each, whole by construction (its reader decodes it)
    stored = Counter() if tree is None else stored_counts(tree)
    if out.json:
        out.record("summary", checkpoint=str(args.checkpoint), checked=str(path),
                   problems=len(problems), kinds=counts, tensors=n_leaves,
                   quantized_groups=len(groups), stored_quantized=dict(stored))
    elif problems:
        kinds = ", ".join(f"{n:,} {kind}" for kind, n in counts.items())
        out.line(f"{len(problems):,} problem(s) ({kinds}).")
    else:
        kinds = ", ".join(f"{n:,} {kind}" for kind, n in stored.items())
        what = f" ({kinds})" if kinds else ""
        out.line(f"No problems: {n_leaves:,} tensors, {len(groups) + stored.total():,} "
                 f"quantized weights{what}, all whole.")
    return FINDING if problems else CLEAN


def _line(out: Output, p: dict) -> str:
    """`index: missing_file: s2.safetensors: ...`, `quant: ['w']: fp8: ...`, `refused: ...`."""
    where = out.paint(p["path"], "bold")
    if p["source"] == "index":
        return f"{out.paint('index', 'red')}: {p['kind']}: {where}: {p['detail']}"
    if p["source"] == "quant":
        return f"{out.paint('quant', 'red')}: {where}: {p['kind']}: {p['detail']}"
    return f"{out.paint('refused', 'red')}: {p['detail']}"
