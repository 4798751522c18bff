"""The last run as Python code: the public-API call that reproduces it.

    snippet(state.history[-1].call, sources)
    # import inspector
    #
    # result = inspector.weighted_sum([t1, t2, t3], [1, 2, 3])

Trees are named as in the app. Trees the user passed in (the notebook) are used by their names;
trees the app built are defined first from where they came from, as their `Origin` record
says (`origins.py`): a built-in example (`examples.load(...)`), a checkpoint file opened,
uploaded, named on the command line or opened from a URL (`inspector.load(...)`), a tree
sharded over a mesh (`inspector.shard(...)`), a converted tree (`inspector.convert(...)`), or
an earlier run whose result was kept (that run's call, as its op's settings write it).
`snippet` is plain Python, testable without a browser; it names no op.
"""

from __future__ import annotations

import keyword
import re

from inspector.ui.session.op_settings import settings_class
from inspector.ui.session.origins import Origin, origin_of, quoted
from inspector.ui.session.records import CallRecord, RunRecord


def snippet(call: CallRecord, sources: dict | None = None,
            history: list[RunRecord] | tuple = ()) -> str:
    """Returns code that reproduces `call` (a run record's `call`) with the public API.

    Args:
        call: the run's `CallRecord` (op, tree names, options, device, repeats).
        sources: where each tree came from, by name (`LoadedTree.origin`, an `Origin`); a
            tree missing here, or passed in by the user, is used by its name.
        history: earlier run records (kept for callers; a kept result's `Result` origin
            holds its own call).

    >>> call = CallRecord("weighted_sum", "", ["t1", "t2"], {"weights": [1, -0.1]})
    >>> print(snippet(call))
    import inspector
    <BLANKLINE>
    result = inspector.weighted_sum([t1, t2], [1, -0.1])
    """
    writer = _Writer(sources or {}, list(history))
    expr = writer.expression(call)
    lines = ["import jax"] if writer.uses_jax else []
    lines.append("import inspector")
    if writer.uses_examples:
        lines.append("from inspector import examples")
    lines.append("")
    lines += writer.example_lines() + writer.definitions
    lines.append(f"result = {expr}")
    if call.device and expr.startswith(f"inspector.{call.op}("):  # a public op: time it so
        args = expr[expr.index("(") + 1:-1]
        lines += ["# timed as in the app:",
                  f"# inspector.run(inspector.{call.op}, {args}, device={quoted(call.device)}, "
                  f"repeats={call.repeats})"]
    return "\n".join(lines)


def variable(name: str) -> str:
    """A Python name for a tree name: itself when it is one (`t1`), else made one
    (`ckpt.npz` -> `ckpt_npz`, `unstack_1[0]` -> `unstack_1_0`)."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    out = re.sub(r"\W+", "_", name).strip("_") or "tree"
    return f"t_{out}" if out[0].isdigit() or keyword.iskeyword(out) else out


def literal(value) -> str:
    """An index tree (lists, tuples, dicts, None, index texts) as Python source; index texts
    that are integers become ints (`"1"` -> `1`), others stay strings (`"1:3"`)."""
    if value is None:
        return "None"
    if isinstance(value, str):
        text = value.strip()
        return text if re.fullmatch(r"-?\d+", text) else quoted(text)
    if isinstance(value, (int, float)):
        return repr(value)
    if type(value) is list:
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if type(value) is tuple:
        items = [literal(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if type(value) is dict:
        return "{" + ", ".join(f"{literal(k) if isinstance(k, str) else repr(k)}: {literal(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"no literal for a {type(value).__name__}")


class _Writer:
    """Writes calls, defining each tree the app built the first time it is used."""

    def __init__(self, sources: dict, history: list):
        self.sources, self.history = sources, history
        self.definitions: list[str] = []
        self.from_examples: dict[str, list[tuple[str, str]]] = {}  # example: [(key, variable)]
        self.defined: set[str] = set()
        self.uses_examples = self.uses_jax = False
        self.literal = literal

    def expression(self, call: CallRecord) -> str:
        names = [self.tree(n) for n in call.trees]
        return settings_class(call.op).code(call, names, self)

    def prefix(self, tree: str, value) -> str:
        """A prefix tree of `tree` (an index tree, a spec tree) as source: a literal, or the
        tree's own structure rebuilt around its top-level entries (namedtuples, dataclasses,
        custom nodes)."""
        try:
            return literal(value)
        except TypeError:
            import jax

            self.uses_jax = True
            top = jax.tree_util.tree_leaves(value, is_leaf=lambda n: n is not value)
            return (f"jax.tree.unflatten(jax.tree.structure({tree}, is_leaf=lambda n: n is not "
                    f"{tree}), {literal(list(top))})")

    def tree(self, name: str) -> str:
        var = variable(name)
        if name in self.defined:
            return var
        self.defined.add(name)
        origin = origin_of(self.sources.get(name, Origin()))
        line = origin.code(var, name, self)
        if line:
            self.definitions.append(line)
        return var

    def from_example(self, example: str, key: str, var: str) -> None:
        """Defines `var` as the tree `key` of a built-in example (one line per example)."""
        self.uses_examples = True
        self.from_examples.setdefault(example, []).append((key, var))

    def example_lines(self) -> list[str]:
        """One line per example the trees come from (examples build in microseconds)."""
        lines = []
        for example, pairs in self.from_examples.items():
            load = f"examples.load({quoted(example)})"
            if len(pairs) == 1:
                lines.append(f"{pairs[0][1]} = {load}[{quoted(pairs[0][0])}]")
            else:
                keys = ", ".join(quoted(k) for k, _ in pairs)
                lines.append(f"{', '.join(v for _, v in pairs)} = ({load}[k] for k in ({keys}))")
        return lines


def state_snippet(state) -> str:
    """The code of the state's last successful run ('' before the first)."""
    if not state.history:
        return ""
    sources = {name: t.origin for name, t in state.trees.items()}
    return snippet(state.history[-1].call, sources, state.history[:-1])
