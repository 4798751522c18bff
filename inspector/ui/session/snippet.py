"""The last run as Python code: the public-API call that reproduces it.

    snippet(state.history[-1].call, sources)
    # import inspector
    #
    # result = inspector.weighted_sum([t1, t2, t3], [1, 2, 3])

Trees are named as in the app. Trees the user passed in (the notebook) are used by their names;
trees the app built are defined first from where they came from: a built-in example
(`examples.load(...)`), a checkpoint file opened, uploaded or named on the command line
(`inspector.load(name)`), or an earlier run whose result was kept (that run's call).
`snippet` is plain Python, testable without a browser.
"""

from __future__ import annotations

import keyword
import re

from inspector import examples
from inspector.ui.session.op_settings import settings_class
from inspector.ui.session.records import CallRecord, RunRecord


def snippet(call: CallRecord, sources: dict[str, str] | None = None,
            history: list[RunRecord] | tuple = ()) -> str:
    """Returns code that reproduces `call` (a run record's `call`) with the public API.

    Args:
        call: the run's `CallRecord` (op, tree names, options, device, repeats).
        sources: where each tree came from, by name (`LoadedTree.source`); a tree missing
            here, or passed in by the user, is used by its name.
        history: earlier run records, to rebuild trees kept from their results.

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
                  f"# inspector.run(inspector.{call.op}, {args}, device={_str(call.device)}, "
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
        return text if re.fullmatch(r"-?\d+", text) else _str(text)
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

    def expression(self, call: CallRecord) -> str:
        names = [self.tree(n) for n in call.trees]
        return settings_class(call.op).code(call, names, self)

    def index(self, tree: str, index) -> str:
        try:
            return literal(index)
        except TypeError:  # a namedtuple, dataclass or custom node: rebuild from the tree
            import jax

            self.uses_jax = True
            top = jax.tree_util.tree_leaves(index, is_leaf=lambda n: n is not index)
            return (f"jax.tree.unflatten(jax.tree.structure({tree}, is_leaf=lambda n: n is not "
                    f"{tree}), {literal(list(top))})")

    def tree(self, name: str) -> str:
        var = variable(name)
        if name in self.defined:
            return var
        self.defined.add(name)
        source = self.sources.get(name, "")
        line = self._definition(name, var, source)
        if line:
            self.definitions.append(line)
        return var

    def _definition(self, name: str, var: str, source: str) -> str | None:
        if source.startswith("example "):
            example = _example_named(source.removeprefix("example "))
            if example is not None:
                key = re.sub(r" \(\d+\)$", "", name)  # a second load renames `t1` to `t1 (2)`
                self.uses_examples = True
                self.from_examples.setdefault(example, []).append((key, var))
                return None
        if source.startswith("file "):
            return f"{var} = inspector.load({_str(source.removeprefix('file '))})"
        if source.startswith("upload "):
            return f"{var} = inspector.load({_str(source.removeprefix('upload '))})  # uploaded"
        if source == "command line":
            return f"{var} = inspector.load({_str(name)})"
        if source.startswith("result of "):
            return self._kept(var, source.removeprefix("result of "))
        if var != name:
            return f"{var} = ...  # the tree named {_str(name)} in the app"
        return None

    def example_lines(self) -> list[str]:
        """One line per example the trees come from (examples build in microseconds)."""
        lines = []
        for example, pairs in self.from_examples.items():
            load = f"examples.load({_str(example)})"
            if len(pairs) == 1:
                lines.append(f"{pairs[0][1]} = {load}[{_str(pairs[0][0])}]")
            else:
                keys = ", ".join(_str(k) for k, _ in pairs)
                lines.append(f"{', '.join(v for _, v in pairs)} = ({load}[k] for k in ({keys}))")
        return lines

    def _kept(self, var: str, label: str) -> str | None:
        part = re.fullmatch(r"(unstack\(.*\))\[(\d+)\]", label)  # one tree of an unstack
        run_label = part.group(1) if part else label
        calls = [h.call for h in self.history if h.call.label == run_label]
        if not calls:
            return f"{var} = ...  # the kept result of {label}"
        suffix = f"[{part.group(2)}]" if part else ""
        note = "" if all(c == calls[-1] for c in calls) else \
            f"  # {run_label} ran with other settings too: this is the last"
        return f"{var} = {self.expression(calls[-1])}{suffix}{note}"


def _str(text: str) -> str:
    """A string literal, in double quotes when it can be."""
    return f'"{text}"' if text.isprintable() and not set(text) & {'"', "\\"} else repr(text)


def _example_named(prefix: str) -> str | None:
    for name in examples.EXAMPLES:
        if name == prefix or name.split(":")[0] == prefix:
            return name
    return None


def state_snippet(state) -> str:
    """The code of the state's last successful run ('' before the first)."""
    if not state.history:
        return ""
    sources = {name: t.source for name, t in state.trees.items()}
    return snippet(state.history[-1].call, sources, state.history[:-1])
