"""Where a loaded tree came from, as a record: each kind of `Origin` knows the text the sidebar
shows and the code that makes the tree again (copy-as-code, `snippet.py`).

    File("ckpt/model.safetensors")       inspector.load("ckpt/model.safetensors")
    Url("https://host/m.safetensors")    inspector.load("https://host/m.safetensors")
    Upload("m.npz")                      inspector.load("m.npz")  # the uploaded file
    Example("S1: weighted sum", "t1")    examples.load("S1: weighted sum")["t1"]
    Sharded("t1", {"data": 2}, specs)    inspector.shard(t1, inspector.mesh({"data": 2}), specs)
    Result(call, part)                   the call's own code (`[part]`: one tree of several)
    Converted("a", "b", alignment)       inspector.convert(a, Alignment.from_json(...), target=b)

`code(var, name, writer)` returns the line that defines `var` (None when the writer defines it
elsewhere, or the tree is the user's own, used by its name).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def quoted(text: str) -> str:
    """A string literal, in double quotes when it can be."""
    return f'"{text}"' if text.isprintable() and not set(text) & {'"', "\\"} else repr(text)


@dataclass(frozen=True)
class Origin:
    """A tree given to the session as it is (`add_tree`, a notebook's trees): `text` says how;
    its code is the user's own variable."""

    text: str = field(default="added", kw_only=True)

    def code(self, var: str, name: str, writer) -> str | None:
        if var != name:  # the user's tree, under a name Python cannot use
            return f"{var} = ...  # the tree named {quoted(name)} in the app (your own)"
        return None


@dataclass(frozen=True)
class File(Origin):
    """A checkpoint file or folder opened by path (relative to the app's root folder, if any,
    else as given)."""

    path: str = ""
    root: bool = False  # the path is relative to the app's root folder

    def __post_init__(self):
        object.__setattr__(self, "text", f"file {self.path}")

    def code(self, var, name, writer):
        note = "  # in the app's root folder" if self.root else ""
        return f"{var} = inspector.load({quoted(self.path)}){note}"


@dataclass(frozen=True)
class CommandLine(Origin):
    """A checkpoint named on the launcher's command line."""

    path: str = ""

    def __post_init__(self):
        object.__setattr__(self, "text", "command line")

    def code(self, var, name, writer):
        return f"{var} = inspector.load({quoted(self.path or name)})"


@dataclass(frozen=True)
class Url(Origin):
    """A checkpoint opened from a URL (credentials taken out)."""

    url: str = ""

    def __post_init__(self):
        object.__setattr__(self, "text", f"url {self.url}")

    def code(self, var, name, writer):
        return f"{var} = inspector.load({quoted(self.url)})"


@dataclass(frozen=True)
class Upload(Origin):
    """A file uploaded through the browser (not kept: the code loads a copy of it by name)."""

    filename: str = ""

    def __post_init__(self):
        object.__setattr__(self, "text", f"upload {self.filename}")

    def code(self, var, name, writer):
        return f"{var} = inspector.load({quoted(self.filename)})  # uploaded"


@dataclass(frozen=True)
class Example(Origin):
    """A tree of a built-in example (`examples.load(example)[key]`)."""

    example: str = ""
    key: str = ""

    def __post_init__(self):
        object.__setattr__(self, "text", f"example {self.example.split(':')[0]}")

    def code(self, var, name, writer):
        writer.from_example(self.example, self.key or name, var)
        return None


@dataclass(frozen=True)
class Sharded(Origin):
    """A loaded tree laid out over a mesh (`inspector.shard`): the tree's name, the mesh's
    axes and the spec prefix tree (spec texts or None)."""

    tree: str = ""
    axes: dict = field(default_factory=dict)
    specs: object = None

    def __post_init__(self):
        from inspector.core.sharding import axes_text

        object.__setattr__(self, "text", f"{self.tree} sharded over {axes_text(self.axes)}")

    def code(self, var, name, writer):
        source = writer.tree(self.tree)
        return (f"{var} = inspector.shard({source}, inspector.mesh({writer.literal(self.axes)}), "
                f"{writer.prefix(source, self.specs)})")


@dataclass(frozen=True)
class Result(Origin):
    """The kept result of a run (`call`); `part`: which of its result trees (an unstack's
    slices), None for the one result."""

    call: object = None
    part: int | None = None

    def __post_init__(self):
        suffix = "" if self.part is None else f"[{self.part}]"
        object.__setattr__(self, "text", f"result of {self.call.label}{suffix}")

    def code(self, var, name, writer):
        suffix = "" if self.part is None else f"[{self.part}]"
        return f"{var} = {writer.expression(self.call)}{suffix}"


@dataclass(frozen=True)
class Converted(Origin):
    """A tree converted onto another's structure (`inspector.convert` with an alignment)."""

    source: str = ""
    target: str = ""
    alignment: str = ""  # `Alignment.to_json()`

    def __post_init__(self):
        object.__setattr__(self, "text", f"{self.source} converted onto {self.target}")

    def code(self, var, name, writer):
        src, dst = writer.tree(self.source), writer.tree(self.target)
        return (f"{var} = inspector.convert({src}, inspector.Alignment.from_json("
                f"{self.alignment!r}), target={dst})")


def origin_of(source) -> Origin:
    """`source` as an `Origin`: itself, or a text (an older caller's) as a plain `Origin`
    (`"command line"`: a `CommandLine`)."""
    if isinstance(source, Origin):
        return source
    return CommandLine() if source == "command line" else Origin(text=str(source))
