"""How every subcommand opens a checkpoint: `inspector.load`, its refusal as exit status 2."""

from __future__ import annotations

from inspector.cli.output import Output


def load_or_fail(path: str, out: Output):
    """Returns `inspector.load(path)` (lazy leaves: headers only), or, when the library refuses
    the file, prints its message and returns the exit status 2 (an int)."""
    import inspector

    try:
        return inspector.load(path)
    except inspector.InspectorError as error:
        return out.fail(str(error))
