"""`parse_index("1:3, ..., 0")`: NumPy-style index text to Python index objects, never `eval`."""

from __future__ import annotations

import re

from inspector.core.errors import IndexParseError

_INT = r"[+-]?\s*\d+"
_TOKEN = re.compile(r"\s*(\.\.\.|:|,|[+-]?\s*\d+|None|newaxis|\S)")
_SPACE = re.compile(r"\s+")  # any whitespace, as `\s` in _TOKEN matches it (tabs, NBSP, ...)
_HINT = "Write an index like NumPy's: 1, -1, 1:3, ::2, ..., 0, or : to keep everything."


def parse_index(text: str) -> tuple:
    """Returns the index written in `text` as a tuple of ints, slices, `...` and `None`.

    Accepts what NumPy accepts between brackets for basic indexing: integers, slices
    (`start:stop:step`, any part optional), one `...`, and `None`/`newaxis` for a new axis,
    separated by commas. Spaces are ignored.

    Raises:
        IndexParseError: the text is not such an index; the message shows where.

    >>> parse_index("1:3, ..., 0")
    (slice(1, 3, None), Ellipsis, 0)
    >>> parse_index("::-2")
    (slice(None, None, -2),)
    """
    if not isinstance(text, str):
        raise IndexParseError(f"An index to parse must be text, got {type(text).__name__}.")
    tokens = _tokenize(text)
    if not tokens:
        raise IndexParseError(f"The index is empty. {_HINT}")
    items: list = []
    pos = 0
    while pos < len(tokens):
        item, pos = _item(text, tokens, pos)
        items.append(item)
        if pos < len(tokens):
            tok, col = tokens[pos]
            if tok != ",":
                _fail(text, col, f"expected ',' between index entries, found {tok!r}")
            pos += 1
            if pos == len(tokens) and len(items) == 1:
                break  # "1," is the tuple (1,), as in NumPy
            if pos == len(tokens):
                break
    if sum(item is Ellipsis for item in items) > 1:
        col = [c for t, c in tokens if t == "..."][1]
        _fail(text, col, "an index can only have a single ellipsis ('...')")
    return tuple(items)


def _tokenize(text: str) -> list[tuple[str, int]]:
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # only trailing spaces remain
            break
        tok = m.group(1)
        col = m.start(1)
        if not tok.strip():
            break
        if tok not in ("...", ":", ",", "None", "newaxis") and not re.fullmatch(_INT, tok):
            _fail(text, col, f"unexpected character {tok!r}")
        tokens.append((_SPACE.sub("", tok), col))
        pos = m.end()
    return tokens


def _item(text: str, tokens: list, pos: int):
    tok, col = tokens[pos]
    if tok == "...":
        return Ellipsis, pos + 1
    if tok in ("None", "newaxis"):
        return None, pos + 1
    if tok == ",":
        _fail(text, col, "an index entry is missing before ','")
    parts: list[int | None] = [None]
    while pos < len(tokens) and tokens[pos][0] not in (",",):
        tok, col = tokens[pos]
        if tok == ":":
            if len(parts) == 3:
                _fail(text, col, "a slice has at most two ':' (start:stop:step)")
            parts.append(None)
        elif tok in ("...", "None", "newaxis"):
            _fail(text, col, f"{tok!r} cannot be part of a slice")
        else:
            if parts[-1] is not None:
                _fail(text, col, "two numbers in a row; separate entries with ','")
            parts[-1] = _int(text, col, tok)
        pos += 1
    if len(parts) == 1:
        return parts[0], pos
    if len(parts) == 3 and parts[2] == 0:
        _fail(text, col, "a slice step cannot be zero")
    return slice(*parts), pos


def _int(text: str, col: int, tok: str) -> int:
    try:
        return int(tok)
    except ValueError:  # Python refuses to convert numbers of more than 4,300 digits
        _fail(text, col, f"a number of {len(tok.lstrip('+-')):,} digits is too long")


def _fail(text: str, col: int, problem: str):
    raise IndexParseError(
        f"Cannot parse index {text!r}: {problem} (at column {col + 1}).\n"
        f"  {text}\n  {' ' * col}^\n{_HINT}"
    )


def format_index(index) -> str:
    """Returns the text form of an index (the inverse of `parse_index`).

    >>> format_index((slice(1, 3), Ellipsis, 0))
    '1:3, ..., 0'
    """
    if not isinstance(index, tuple):
        index = (index,)

    def one(item) -> str:
        if item is Ellipsis:
            return "..."
        if item is None:
            return "None"
        if isinstance(item, slice):
            start = "" if item.start is None else str(item.start)
            stop = "" if item.stop is None else str(item.stop)
            return f"{start}:{stop}" + ("" if item.step is None else f":{item.step}")
        return str(item)

    return ", ".join(one(i) for i in index)
