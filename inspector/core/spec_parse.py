"""`parse_spec("data, None")`: a `PartitionSpec` written as text, read without `eval`."""

from __future__ import annotations

import re

from jax.sharding import PartitionSpec

from inspector.core.errors import ShardingError

_TOKEN = re.compile(r"\s*(\(|\)|,|'[^']*'|\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_]*|\S)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HINT = ("Write one entry per leading dimension: a mesh axis name, None, or several axes in "
         "parentheses, e.g. data, None or (data, model), None; leave it empty to replicate.")
_REPLICATED = ("", "replicated", "P()", "PartitionSpec()")


def parse_spec(text: str) -> PartitionSpec:
    """Returns the `PartitionSpec` written in `text`.

    Entries are separated by commas, one per leading dimension of a leaf: a mesh axis name
    (quoted or not), `None` (that dimension is not split), or a parenthesised group of axis
    names (the dimension splits over their product). `P(...)` / `PartitionSpec(...)` around
    the entries is allowed; empty text and `replicated` mean `PartitionSpec()`.

    Raises:
        ShardingError: the text is not such a spec; the message shows where.

    >>> parse_spec("data, None")
    P('data', None)
    >>> parse_spec("P(('data', 'model'),)")
    P(('data', 'model'),)
    >>> parse_spec("")
    P()
    """
    if not isinstance(text, str):
        raise ShardingError(f"A spec to parse must be text, got {type(text).__name__}.")
    if text.strip() in _REPLICATED:
        return PartitionSpec()
    tokens = _tokenize(text)
    if len(tokens) >= 3 and tokens[0][0] in ("P", "PartitionSpec") and tokens[1][0] == "(":
        if tokens[-1][0] != ")":
            _fail(text, tokens[-1][1], f"expected ')' to close {tokens[0][0]}(")
        tokens = tokens[2:-1]
        if not tokens:
            return PartitionSpec()
    entries: list = []
    pos = 0
    while pos < len(tokens):
        entry, pos = _entry(text, tokens, pos)
        entries.append(entry)
        if pos < len(tokens):
            tok, col = tokens[pos]
            if tok != ",":
                _fail(text, col, f"expected ',' between entries, found {tok!r}")
            pos += 1
    return PartitionSpec(*entries)


def _tokenize(text: str) -> list[tuple[str, int]]:
    tokens = []
    for m in _TOKEN.finditer(text):
        tok, col = m.group(1), m.start(1)
        if tok[0] in "'\"":
            tok = tok[1:-1]
            if not _NAME.fullmatch(tok):
                _fail(text, col, f"{tok!r} is not a mesh axis name")
        elif tok not in "(),"  and not _NAME.fullmatch(tok):
            _fail(text, col, f"unexpected character {tok!r}")
        tokens.append((tok, col))
    return tokens


def _entry(text: str, tokens: list, pos: int):
    tok, col = tokens[pos]
    if tok == ",":
        _fail(text, col, "an entry is missing before ','")
    if tok == ")":
        _fail(text, col, "unmatched ')'")
    if tok != "(":
        return (None if tok == "None" else tok), pos + 1
    names: list[str] = []
    pos += 1
    while True:
        if pos >= len(tokens):
            _fail(text, col, "'(' is never closed")
        tok, where = tokens[pos]
        if tok == ")":
            break
        if tok in ("(", ",", "None"):
            _fail(text, where, "a group holds mesh axis names only, separated by ','")
        names.append(tok)
        pos += 1
        if pos < len(tokens) and tokens[pos][0] == ",":
            pos += 1
    if not names:
        _fail(text, col, "an empty group '()'; write None for a dimension that is not split")
    return (names[0] if len(names) == 1 else tuple(names)), pos + 1


def _fail(text: str, col: int, problem: str):
    raise ShardingError(
        f"Cannot parse spec {text!r}: {problem} (at column {col + 1}).\n"
        f"  {text}\n  {' ' * col}^\n{_HINT}"
    )


def format_spec(spec: PartitionSpec) -> str:
    """Returns the text form of a spec, as `parse_spec` reads it (`data, None`).

    >>> format_spec(PartitionSpec(("data", "model"), None))
    '(data, model), None'
    """

    def one(entry) -> str:
        if entry is None:
            return "None"
        if isinstance(entry, tuple):
            return "(" + ", ".join(entry) + ")"
        return str(entry)

    return ", ".join(one(e) for e in spec)
