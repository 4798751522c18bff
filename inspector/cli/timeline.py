"""`pytree-inspector timeline DIR_OR_CKPTS...`: how every leaf moved across a run.

    pytree-inspector timeline runs/exp1/checkpoints       # orbax step folders, ckpt_1000.* files
    pytree-inspector timeline step_100.safetensors step_200.safetensors step_300.safetensors

`inspector.timeline` of the checkpoints (each read once, leaf by leaf), summarised per step:
how many leaves changed against the step before, the largest relative change and where,
the NaN/Inf count and the structure changes; then the frozen leaves (bitwise equal at every
step) and, per leaf that ever holds NaN/Inf, the first step where it does. Exit status 1 when
a NaN or Inf is found.
"""

from __future__ import annotations

from inspector.cli.output import CLEAN, FINDING, Output, add_device, common_options, finite, plural


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "timeline", parents=[common_options()], help="per-step summary of a run's checkpoints",
        description="Summarise a run's checkpoints step by step: leaves changed, the largest "
        "relative change and where, NaN/Inf count, structure changes; then the frozen leaves "
        "and the first step of NaN/Inf per leaf. Give a folder (orbax step folders, or files "
        "with the step in their names) or the checkpoints in step order. Exit status 1 when "
        "any NaN or Inf is found, 0 when none.")
    parser.add_argument("sources", nargs="+", metavar="DIR_OR_CKPT",
                        help="a folder of checkpoints, or checkpoints in step order")
    add_device(parser, "the reductions run")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Output(args.json, args.quiet)
    from pathlib import Path

    import inspector

    one = args.sources[0]
    sources = one if len(args.sources) == 1 and Path(one).is_dir() else list(args.sources)
    try:
        with out.progress("reading leaves") as progress:
            t = inspector.timeline(sources, device=args.device, progress=progress)
    except (inspector.InspectorError, ValueError) as error:  # unreadable, no checkpoints
        return out.fail(str(error))
    steps = step_summaries(t)
    frozen = t.frozen()
    first = t.first_nonfinite()
    if out.json:
        for s in steps:
            out.record("step", **{**s, "max_rel_change": finite(s["max_rel_change"])})
        for path in frozen:
            out.record("frozen", path=path)
        for path, label in first.items():
            out.record("nonfinite", path=path, first_label=label)
        out.record("summary", steps=len(t.labels), labels=t.labels, leaves=len(t.paths),
                   frozen=len(frozen), nonfinite_leaves=len(first),
                   structure_changes=len(t.changes), seconds=round(t.seconds, 3),
                   left_out=[str(p) for p in t.left_out])
    else:
        _text(out, t, steps, frozen, first)
    return FINDING if first else CLEAN


def step_summaries(t) -> list[dict]:
    """One dict per step: `label`, `leaves`, `changed` (leaves whose bits changed against the
    step before; None at the first step), `max_rel_change` and `max_rel_change_path`,
    `nonfinite` (NaN + Inf elements), `structure` (the `StructureChange`s at that step)."""
    import numpy as np

    s = t.sums
    rel = t.table("rel_change").values
    out = []
    for i, label in enumerate(t.labels):
        paired = s["paired"][:, i]
        changes = [c for c in t.changes if c.label == label]
        column = np.where(paired, rel[:, i], np.nan)
        top = None if i == 0 or np.isnan(column).all() else int(np.nanargmax(column))
        out.append(dict(
            label=label, leaves=int(s["present"][:, i].sum()),
            changed=None if i == 0 else int((paired & (s["changed"][:, i] > 0)).sum()),
            max_rel_change=None if top is None else float(column[top]),
            max_rel_change_path=None if top is None else t.paths[top],
            nonfinite=int(np.where(s["present"][:, i], s["nonfinite"][:, i], 0).sum()),
            structure=[dict(path=c.path, kind=c.kind, before=str(c.before),
                            after=str(c.after)) for c in changes]))
    return out


def _text(out: Output, t, steps, frozen, first) -> None:
    rows = [(str(s["label"]), f"{s['leaves']:,}",
             "-" if s["changed"] is None else f"{s['changed']:,}",
             "-" if s["max_rel_change"] is None else f"{s['max_rel_change']:.4g}",
             s["max_rel_change_path"] or "-", f"{s['nonfinite']:,}",
             str(len(s["structure"])) if s["structure"] else "-") for s in steps]
    head = ("step", "leaves", "changed", "max rel_change", "where", "nan/inf", "structure")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def fmt(cells) -> str:
        return "  ".join(c.ljust(w) if i == 4 else c.rjust(w) if i else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out.line(out.paint(fmt(head), "bold"))
    for s, row in zip(steps, rows, strict=True):
        out.line(out.paint(fmt(row), "red") if s["nonfinite"] else fmt(row))
    for s in steps:
        for c in s["structure"]:
            what = (f"appeared ({c['after']})" if c["kind"] == "extra" else
                    f"gone ({c['before']})" if c["kind"] == "missing" else
                    f"{c['kind']} {c['before']} -> {c['after']}")
            out.line(f"step {s['label']}: {c['path']}: {what}")
    if frozen:
        out.line(f"frozen at every step ({len(frozen):,}): " + ", ".join(frozen[:20])
                 + (", ..." if len(frozen) > 20 else ""))
    for path, label in first.items():
        out.line(out.paint(f"first NaN/Inf: {path} at step {label}", "red"))
    if t.left_out:
        out.line("left out (not named like the run's checkpoints): "
                 + ", ".join(p.name for p in t.left_out))
    tail = f"{plural(len(first), 'leaf', 'leaves')} with NaN/Inf" if first else "no NaN or Inf"
    out.line(f"{plural(len(t.labels), 'step')}, {plural(len(t.paths), 'leaf', 'leaves')} read "
             f"in {t.seconds:.2f} s: {len(frozen):,} frozen, "
             f"{plural(len(t.changes), 'structure change')}, {tail}.")
