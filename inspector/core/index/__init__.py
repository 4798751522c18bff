"""Indexing trees: `index(tree, index_tree)`, a NumPy-style index per subtree, compiled once.

- `parse`: index text (`"1:3, ..., 0"`) to index objects and back, never `eval`;
- `rules`: an index normalised per leaf (static pattern, traced starts) and its misfits;
- `indexing`: `index` itself, leaf by leaf;
- `packed`: an index on a packed stack's leading axes, one kernel per dtype.
"""
