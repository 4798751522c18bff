"""Where a subcommand's words go: results on stdout, notes and progress on stderr.

- Results: text lines, or with `--json` one JSON object per line (each with a `"type"`).
- Colour only when that stream is a terminal, and never when `NO_COLOR` is set (no-color.org).
- Progress: on a terminal, a bar redrawn in place once work has taken a second; otherwise a
  plain line now and then; nothing with `--quiet`.
- Errors: `pytree-inspector: <the library's message>` on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, is_dataclass

PROG = "pytree-inspector"

# Exit statuses of every subcommand.
CLEAN, FINDING, ERROR = 0, 1, 2

_STYLES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
           "magenta": "35", "cyan": "36"}


def common_options() -> argparse.ArgumentParser:
    """The options every report subcommand takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true",
                        help="results as JSON, one object per line (each with a \"type\")")
    common.add_argument("-q", "--quiet", action="store_true",
                        help="no notes or progress on stderr (errors still)")
    return common


def add_device(parser: argparse.ArgumentParser, what: str = "the kernels run") -> None:
    """`--device`: where the work runs (`cpu`, `gpu:0`; JAX's default when not given)."""
    parser.add_argument("--device", default=None,
                        help=f"where {what} (e.g. cpu, gpu:0; default JAX's)")


def add_out_file(parser: argparse.ArgumentParser) -> None:
    """`-o/--out`: the file a subcommand writes."""
    parser.add_argument("-o", "--out", required=True, metavar="OUT",
                        help="the file to write (.safetensors or .npz)")


def use_colour(stream) -> bool:
    """Whether to colour what goes to `stream`: a terminal, and `NO_COLOR` unset (or empty)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Output:
    """A subcommand's two streams, with its `--json` and `--quiet` choices.

    Args:
        as_json: results as JSON lines instead of text.
        quiet: no notes and no progress on stderr (errors and warnings still).
    """

    def __init__(self, as_json: bool = False, quiet: bool = False, stdout=None, stderr=None):
        self.json = as_json
        self.quiet = quiet
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.colour = not as_json and use_colour(self.stdout)

    def line(self, text: str = "") -> None:
        """One result line (text mode)."""
        self.stdout.write(text + "\n")

    def record(self, kind: str, /, **fields) -> None:
        """One result as a JSON object on its own line, `{"type": kind, ...}`."""
        self.stdout.write(json.dumps({"type": kind, **fields}, ensure_ascii=False,
                                     default=jsonable, allow_nan=False) + "\n")

    def paint(self, text: str, *styles: str) -> str:
        """`text` in the given styles (`"bold"`, `"red"`, ...) when colouring, else as is."""
        if not self.colour or not styles:
            return text
        codes = ";".join(_STYLES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def note(self, text: str) -> None:
        """A note on stderr (left out with `--quiet`)."""
        if not self.quiet:
            print(f"{PROG}: {text}", file=self.stderr, flush=True)

    def warn(self, text: str) -> None:
        """A warning on stderr (shown even with `--quiet`)."""
        print(f"{PROG}: warning: {text}", file=self.stderr, flush=True)

    def fail(self, message: str) -> int:
        """Prints the error on stderr; returns the exit status for errors (2)."""
        return fail(message, self.stderr)

    def progress(self, what: str) -> Progress:
        """A progress display for `what` (e.g. `"merging"`): call it with (done, total)."""
        return Progress(what, self.stderr, enabled=not self.quiet)

    def write_or_fail(self, what: str, target: str, work):
        """Returns `work(progress)`, a streamed write shown as `what` (e.g. `"merging"`).

        Raises:
            Failed: the library refused (its message printed) or writing failed (`Cannot
                write <target>: <why>.`).
        """
        from inspector.core.errors import InspectorError

        try:
            with self.progress(what) as progress:
                return work(progress)
        except InspectorError as error:
            raise Failed(self.fail(str(error))) from None
        except OSError as error:
            raise Failed(self.fail(f"Cannot write {target}: {error.strerror or error}.")) \
                from None


def fail(message: str, stream=None) -> int:
    """Prints `pytree-inspector: message` on stderr and returns 2 (an error)."""
    print(f"{PROG}: {message}", file=stream or sys.stderr, flush=True)
    return ERROR


class Failed(Exception):  # noqa: N818 (not an error of the program: a subcommand's outcome)
    """A subcommand stops here with exit status `status`, its message already printed
    (`loading.load_or_fail`); the command line's `main` returns the status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class Progress:
    """How far some work has got, on stderr: `progress(done, total, detail="")`.

    Nothing is shown for work done within `delay` seconds. After that, a terminal gets a bar
    redrawn in place (at most ten times a second) and erased by `close()`; a pipe or file gets
    a plain line at most every `every` seconds, and one at the end.
    """

    def __init__(self, what: str, stream, enabled: bool = True, delay: float = 1.0,
                 every: float = 5.0, clock=time.monotonic):
        self.what = what
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and bool(getattr(stream, "isatty", None) and stream.isatty())
        self.delay, self.every, self.clock = delay, every, clock
        self.start = clock()
        self.last = None  # when something was last shown
        self.drawn = False
        self.state = (0, 0, "")
        self.printed = None  # the state of the last plain line

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        self.state = (done, total, detail)
        if not self.enabled:
            return
        now = self.clock()
        if now - self.start < self.delay:
            return
        if self.tty:
            if self.last is None or now - self.last >= 0.1 or done >= total:
                self._draw(done, total, detail)
                self.last = now
        elif self.last is None or now - self.last >= self.every:
            self._print(done, total, detail)
            self.last = now

    def _text(self, done: int, total: int, detail: str) -> str:
        share = done / total if total else 1.0
        tail = f" · {detail}" if detail else ""
        return f"{self.what}: {done:,}/{total:,} ({share:.0%}){tail}"

    def _draw(self, done: int, total: int, detail: str) -> None:
        share = done / total if total else 1.0
        width = 24
        full = min(width, math.floor(share * width))
        bar = "#" * full + "-" * (width - full)
        self.stream.write(f"\r\x1b[K[{bar}] {self._text(done, total, detail)}")
        self.stream.flush()
        self.drawn = True

    def _print(self, done: int, total: int, detail: str) -> None:
        self.printed = (done, total, detail)
        print(f"{PROG}: {self._text(done, total, detail)}", file=self.stream, flush=True)

    def rate(self, p) -> None:
        """`progress=` for the library's streamed writers (`merge`, `convert`, `dequantize`):
        their `p.done` of `p.total`, with the rate `p.rate` (bytes a second)."""
        from inspector.core.node_text import human_bytes

        self(p.done, p.total, f"{human_bytes(p.rate)}/s")

    def close(self) -> None:
        """Erases the bar (terminal), or prints the last state if lines were printed."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
        elif self.last is not None and not self.tty and self.printed != self.state:
            self._print(*self.state)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def jsonable(value):
    """JSON for what `json` does not know: tuples of a shape are lists already; dataclasses
    (a `Row.quant`, say) become objects, NumPy numbers plain numbers, the rest their text."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 leaf`, `3 leaves`: the count with thousands separators and the word as it agrees."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def finite(x: float | None) -> float | str | None:
    """A float for JSON: NaN and infinities as the strings `"nan"`, `"inf"`, `"-inf"` (strict
    JSON has no such numbers)."""
    if x is None or math.isfinite(x):
        return x
    return str(x)
