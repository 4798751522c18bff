"""The last run as Python code: the public-API call that reproduces it, and a button to copy it.

    snippet(state.history[-1]["call"], sources)
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

import panel as pn
import panel_material_ui as pmui
import param
from panel.custom import JSComponent

from inspector import examples
from inspector.ui.formatting import MONO


def snippet(call: dict, sources: dict[str, str] | None = None,
            history: list[dict] | tuple = ()) -> str:
    """Returns code that reproduces `call` (a run record's `call`) with the public API.

    Args:
        call: `op`, `label`, `trees` (names), `weights` or `index`, `device`, `repeats`.
        sources: where each tree came from, by name (`LoadedTree.source`); a tree missing
            here, or passed in by the user, is used by its name.
        history: earlier run records, to rebuild trees kept from their results.

    >>> print(snippet({"op": "weighted_sum", "trees": ["t1", "t2"], "weights": [1, -0.1]}))
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
    if call.get("device"):
        args = expr[expr.index("(") + 1:-1]
        lines += ["# timed as in the app:",
                  f"# inspector.run(inspector.{call['op']}, {args}, device={_str(call['device'])}, "
                  f"repeats={call.get('repeats', 5)})"]
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

    def expression(self, call: dict) -> str:
        names = [self.tree(n) for n in call["trees"]]
        op = call["op"]
        if op == "weighted_sum":
            weights = ", ".join(literal(w) for w in call["weights"])
            return f"inspector.weighted_sum([{', '.join(names)}], [{weights}])"
        if op == "index":
            return f"inspector.index({names[0]}, {self.index(names[0], call['index'])})"
        if op == "stack":
            return f"inspector.stack([{', '.join(names)}])"
        return f"inspector.unstack({names[0]})"

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
        calls = [h["call"] for h in self.history if h.get("call", {}).get("label") == run_label]
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
    if not state.history or "call" not in state.history[-1]:
        return ""
    sources = {name: t.source for name, t in state.trees.items()}
    return snippet(state.history[-1]["call"], sources, state.history[:-1])


# Material Design's content_copy icon (Apache 2.0), inline: nothing to fetch.
_COPY_ICON = (
    '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M16 1H4c-1.1 0-2 .9-2 2v14h2V3h12V1zm3'
    ' 4H8c-1.1 0-2 .9-2 2v14c0 1.1.9 2 2 2h11c1.1 0 2-.9 2-2V7c0-1.1-.9-2-2-2zm0 16H8V7h11v14z"/>'
    '</svg>')


class CopyButton(JSComponent):
    """A button that copies `text` to the clipboard, in the browser itself: the copy needs
    the click's user activation (a round trip to Python would lose it), and the button works
    wherever it is added, also after the page loaded (Panel's JS links are set up only on a
    page's first render)."""

    text = param.String(default="", doc="What a click copies.")
    label = param.String(default="Copy as code", doc="The button's text.")
    description = param.String(default="Copy the last run as Python code",
                               doc="Tooltip and accessible name.")

    _esm = """
    export function render({ model }) {
      const button = document.createElement("button")
      button.type = "button"
      button.className = "copy-button"
      const icon = 'COPY_ICON'
      const show = (text) => {
        button.innerHTML = icon + "<span></span>"
        button.lastChild.textContent = text
        button.title = model.description
        button.setAttribute("aria-label", model.description)
      }
      show(model.label)
      button.onclick = async () => {
        try {
          await navigator.clipboard.writeText(model.text)
          show("Copied")
        } catch (error) {
          show("Copy failed: select the text")
        }
        setTimeout(() => show(model.label), 1500)
      }
      model.on(["label", "description"], () => show(model.label))
      return button
    }
    """.replace("COPY_ICON", _COPY_ICON)

    _stylesheets = ["""
    button.copy-button {
      display: inline-flex; align-items: center; gap: 6px; cursor: pointer;
      font: 500 13px/1.7 Roboto, Helvetica, Arial, sans-serif; letter-spacing: 0.02em;
      color: var(--mui-palette-primary-main, #1976d2); background: transparent;
      border: 1px solid rgba(25, 118, 210, 0.5); border-radius: 4px; padding: 3px 9px;
    }
    button.copy-button:hover { background: rgba(25, 118, 210, 0.04); border-color: #1976d2; }
    button.copy-button svg { width: 16px; height: 16px; fill: currentColor; }
    """]


class CodeSnippetView(pn.viewable.Viewer):
    """'Copy as code': the last run as a short script, shown and copied to the clipboard."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.area = pmui.TextAreaInput(
            value="", label="The last run as code", auto_grow=True, rows=3, max_rows=14,
            sizing_mode="stretch_width", margin=(5, 5),
            sx={"& textarea": {"fontFamily": MONO, "fontSize": "12.5px"}})
        self.button = CopyButton(margin=(5, 5))
        self._layout = pmui.Column(self.button, self.area, sizing_mode="stretch_width",
                                   visible=False, margin=0)
        state.param.watch(self._update, ["history", "trees"])
        self._update()

    def __panel__(self):
        return self._layout

    @property
    def code(self) -> str:
        """The snippet shown now."""
        return self.area.value

    def _update(self, *_):
        code = state_snippet(self._state)
        self.area.value = self.button.text = code
        self._layout.visible = bool(code)
