"""`pytree-inspector show CKPT`: the tree as the app shows it, as text (or JSON lines).

    pytree-inspector show model.safetensors                 # repeated layers folded
    pytree-inspector show model.safetensors --depth 2       # the top two levels
    pytree-inspector show model.safetensors --match 'attn.*weight' --json
    pytree-inspector show model.safetensors --all           # every node, nothing folded

One line per node: its key path (indented by depth), what it is (`float32[4096,4096]`,
`dict of 4`), its parameters and bytes (subtree totals on inner nodes). Runs of sibling
subtrees of one structure fold into one line (`['layers'][0…79] ×80 · dict of 4 · 12.6M
params each`), more than 100 siblings into ranges: the folding is the app's own
(`inspector.core.tree_index`). The file's metadata (`inspector.file_info`: safetensors
`__metadata__`, a sharded index's `metadata`, GGUF key/values) comes first. Reads headers
only: no array data, no JAX.
"""

from __future__ import annotations

import math
import re

from inspector.cli.output import CLEAN, Output, common_options
from inspector.core.node_text import human_bytes, human_count, node_text, totals_text

_INDENT = "  "


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "show", parents=[common_options()], help="print a checkpoint's tree",
        description="Print a checkpoint's tree as the app shows it: one line per node with "
        "its kind, shape, dtype, parameters and bytes (subtree totals on inner nodes), "
        "repeated layers folded, more than 100 siblings in ranges; the file's metadata first. "
        "Reads no array data.")
    parser.add_argument("path", help="a checkpoint file or folder, or a URL")
    parser.add_argument("--depth", type=_depth, default=None, metavar="N",
                        help="show nodes down to depth N (the root is depth 0)")
    parser.add_argument("--match", type=_regex, default=None, metavar="REGEX",
                        help="show only the nodes whose key path matches REGEX (searched; "
                        "folds and ranges are opened to find them)")
    parser.add_argument("--all", action="store_true",
                        help="every node: no folding of repeated layers, no ranges")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    import inspector
    from inspector.cli.loading import checkpoint_path_or_fail, load_or_fail
    from inspector.core.tree_index import TreeIndex

    path = checkpoint_path_or_fail(args.path, out)  # a folder's model file, found once
    tree = load_or_fail(path, out)
    rows = inspector.describe(tree)
    index = TreeIndex(rows, tree)  # the tree: quantized weights shown as one row each
    every = args.all or args.match is not None
    index.fold = not every
    fmt, metadata = _about(path)
    root = rows[0]
    if out.json:
        out.record("file", path=str(args.path), format=fmt, metadata=metadata,
                   leaves=root.n_leaves, params=root.n_params, bytes=root.nbytes)
    else:
        _header(out, args.path, fmt, metadata, root)
    shown = 0
    for entry, depth in _walk(index, args.depth, every):
        if args.match is not None and not args.match.search(_path(index, entry)):
            continue
        shown += 1
        if out.json:
            kind, fields = _record(index, entry, depth)
            out.record(kind, **fields)
        else:
            out.line(_text(out, index, entry, depth))
    if args.match is not None:
        out.note(f"{shown:,} of {len(rows):,} nodes match {args.match.pattern!r}.")
    return CLEAN


def _about(path: str) -> tuple[str, dict]:
    """The file's format and metadata (`("", {})` where they cannot be told)."""
    from inspector.core.errors import InspectorError
    from inspector.io.file_info import file_info

    try:
        info = file_info(path)
        return info.format, dict(info.metadata)
    except (InspectorError, OSError):
        return "", {}


def _walk(index, max_depth: int | None, every: bool):
    """`(entry, depth)` in display order; with `every`, all nodes (no folds, no ranges)."""
    stack = [(("node", 0), 0)]
    while stack:
        entry, depth = stack.pop()
        yield entry, depth
        if entry[0] != "node" or (max_depth is not None and depth >= max_depth):
            continue  # folds and ranges stand for their members
        if every:
            kids = [("node", j) for j in index.children[entry[1]]]
        elif index.has_children(entry):
            kids = index.child_entries(entry)
        else:
            continue
        stack.extend((e, depth + 1) for e in reversed(kids))


def _path(index, entry) -> str:
    """The entry's key path; for a fold or range, its parent's path and the positions."""
    if entry[0] == "node":
        return index.rows[entry[1]].path
    kind, parent, lo, hi = entry
    where = index.rows[parent].path
    return f"{where}[{lo}\u2026{hi - 1}]" if kind == "fold" else f"{where}[{lo}:{hi}]"


def _header(out: Output, path, fmt: str, metadata: dict, root) -> None:
    about = " · ".join(x for x in (fmt, totals_text(root.n_leaves, root.n_params, root.nbytes))
                       if x)
    out.line(f"{out.paint(str(path), 'bold')} · {about}")
    for key in sorted(metadata, key=str):  # files keep no order (safetensors writes a map)
        out.line(out.paint(f"metadata: {key} = {metadata[key]}", "dim"))


def _text(out: Output, index, entry, depth: int) -> str:
    pad = _INDENT * depth
    if entry[0] != "node":
        parts, secondary = index.label_parts(entry)
        where = index.rows[entry[1]].path
        if entry[0] == "fold":
            lo = entry[2]
            first = index.rows[index.children.slice(entry[1], lo, lo + 1)[0]].key
            keys = "" if first == f"[{lo}]" else f" ({parts[1]})"
            return (f"{pad}{out.paint(where + parts[0], 'bold')}{keys} · "
                    f"{out.paint(parts[2], 'cyan')} · {out.paint(secondary, 'dim')}")
        return f"{pad}{out.paint(where + parts[0], 'bold')} ({parts[1]}) · " \
               f"{out.paint(secondary, 'dim')}"
    row = index.rows[entry[1]]
    group = index.quant_group(entry[1])
    if group is not None and group.shape is not None:  # a quantized weight: one row
        parts, _ = index.label_parts(entry)
        problems = "".join(" · " + out.paint(f"problem: {p}", "red") for p in group.problems)
        layout = parts[2] if parts[2].startswith(group.scheme) else f"{group.scheme}: {parts[2]}"
        return (f"{pad}{out.paint(group.path, 'bold')} {out.paint(parts[1], 'cyan')} · "
                f"{out.paint(layout, 'magenta')} · "
                f"{human_count(math.prod(group.shape))} params · {parts[3]}{problems}")
    name = out.paint(row.path or "(root)", "bold")
    what = out.paint(node_text(row), "cyan")
    if row.kind == "leaf":
        tail = "" if row.shape is None else \
            f" · {human_count(row.n_params)} params · {human_bytes(row.nbytes)}"
        if row.sharding:
            tail += f" · {row.sharding}"
    elif row.kind == "None":
        tail = ""
    else:
        tail = " · " + out.paint(totals_text(row.n_leaves, row.n_params, row.nbytes)
                                 + index.order_note(entry[1]), "dim")
    if row.quant is not None:  # a tensor its file stores quantized (GGUF), or an orphan
        tail += " · " + out.paint(f"quantized: {row.quant}", "magenta")
    return f"{pad}{name} {what}{tail}"


def _record(index, entry, depth: int) -> tuple:
    """`(type, fields)` of the entry's JSON line."""
    if entry[0] != "node":
        kind, parent, lo, hi = entry
        kids = index.children.slice(parent, lo, hi)
        first, last = index.rows[kids[0]], index.rows[kids[-1]]
        fields = dict(path=_path(index, entry), parent=index.rows[parent].path, depth=depth,
                      lo=lo, hi=hi, count=hi - lo, first=first.key, last=last.key)
        if kind == "fold":
            return "fold", dict(fields, kind=first.kind, type_name=first.type_name,
                                children=first.n_children, leaves_each=first.n_leaves,
                                params_each=first.n_params, bytes_each=first.nbytes,
                                bytes=first.nbytes * (hi - lo))
        rows = [index.rows[j] for j in kids]
        return "range", dict(fields, leaves=sum(r.n_leaves for r in rows),
                             params=sum(r.n_params for r in rows),
                             bytes=sum(r.nbytes for r in rows))
    row = index.rows[entry[1]]
    fields = dict(path=row.path, depth=depth, kind=row.kind, type_name=row.type_name,
                  shape=None if row.shape is None else list(row.shape), dtype=row.dtype,
                  params=row.n_params, bytes=row.nbytes, leaves=row.n_leaves,
                  children=row.n_children)
    if row.sharding:
        fields["sharding"] = row.sharding
    if row.quant is not None:
        fields["quant"] = row.quant
    group = index.quant_group(entry[1])
    if group is not None and group.shape is not None:  # the weight, not its codes
        fields.update(path=group.path, shape=list(group.shape), dtype=group.dtype,
                      params=math.prod(group.shape), bytes=index.group_bytes(group),
                      quant=dict(scheme=group.scheme, members=dict(group.members),
                                 problems=list(group.problems)))
    return "node", fields


def _depth(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, 0 or more")
    return n


def _regex(text: str):
    import argparse

    try:
        return re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a regular expression: {error}") from None
