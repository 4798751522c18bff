"""`pytree-inspector`: the inspector in a terminal, in scripts and in CI.

    pytree-inspector show model.safetensors --depth 2      # the tree, as the app shows it
    pytree-inspector diff old.safetensors new.safetensors --values   # exit 1 if they differ
    pytree-inspector merge soup.yml out/                    # mergekit's YAML, our engine
    pytree-inspector scan ckpt.safetensors --nonfinite      # exit 1 on NaN/Inf
    pytree-inspector timeline runs/exp1/checkpoints         # per-step summary of a run
    pytree-inspector check model.safetensors.index.json     # index, quantization, refusals
    pytree-inspector convert src.pt --to target.safetensors -o ported.safetensors
    pytree-inspector dequantize fp8/ -o bf16.safetensors
    pytree-inspector model.safetensors                      # no subcommand: serve the app

One module per subcommand (`show.py`, `diff.py`, `merge.py`, `scan.py`, `timeline.py`,
`check.py`, `convert.py`, `dequantize.py`, `serve.py`), each with
`add_parser(subparsers)` and `run(args) -> int`; `output.py` holds what they share (stdout
for results, stderr for notes and progress, `--json`, colour, exit statuses, a streamed
write), `loading.py` how they open a checkpoint, `hosts.py` the `jax.distributed` protocol
`serve` speaks when served from several hosts. A new
subcommand is one module and one line in `SUBCOMMANDS`. Every module imports its heavy parts
(the library, JAX, the app) inside `run`, so `--help` and `show` stay quick.

The first argument picks the subcommand when it names one; anything else (`pytree-inspector
CKPT...`, or options first) serves the app, exactly as before subcommands existed. A checkpoint
whose path is a subcommand's name is opened with `serve` or as `./show`.

Exit statuses: 0 clean, 1 a finding (differences, NaN/Inf, problems), 2 an error (bad
arguments, an unreadable file: the library's message, no traceback). Only this package and
`main.py` print or exit.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from inspector.cli.output import PROG, Failed, fail
from inspector.cli.serve import check_exposure, load_all, parse_args  # noqa: F401  (public)

SUBCOMMANDS = {
    "show": "inspector.cli.show",
    "diff": "inspector.cli.diff",
    "merge": "inspector.cli.merge",
    "scan": "inspector.cli.scan",
    "timeline": "inspector.cli.timeline",
    "check": "inspector.cli.check",
    "convert": "inspector.cli.convert",
    "dequantize": "inspector.cli.dequantize",
    "serve": "inspector.cli.serve",
}


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one subparser per module of `SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="See pytree checkpoints in a terminal (show, diff, scan, timeline, "
        "check), merge them from a mergekit YAML (merge), port (convert) or dequantize them, "
        "or open them in the app (serve; the default: "
        f"`{PROG} CKPT...`). Exit status: 0 clean, 1 a finding, 2 an error.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 clean, 1 a finding, 2 an error)."""
    argv = sys.argv[1:] if argv is None else [os.fspath(a) for a in argv]
    parser = build_parser()
    if argv and argv[0] in SUBCOMMANDS:
        if os.path.exists(argv[0]) and argv[0] != "serve":
            print(f"{PROG}: note: {argv[0]!r} is read as the subcommand; to open the "
                  f"checkpoint of that name, write ./{argv[0]} or `{PROG} serve {argv[0]}`.",
                  file=sys.stderr)
        args = parser.parse_args(argv)
    elif argv and argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    else:
        args = parse_args(argv)  # no subcommand: serve, with the app's options as before
        args.run = importlib.import_module(SUBCOMMANDS["serve"]).run
    try:
        return args.run(args)
    except Failed as failed:  # the message is printed already
        return failed.status
    except BrokenPipeError:  # `pytree-inspector show big.safetensors | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return fail("interrupted.")
