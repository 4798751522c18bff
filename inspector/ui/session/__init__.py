"""The session model: everything one inspector session knows and does, without Panel.

State, op settings, tree and diff indexes, the worker queue, leaf numbers, the snippet writer,
checkpoint files and examples live here and import `param` and the public `inspector` API only
(ruff bans panel and bokeh in this folder); the views in `inspector/ui/` show them.
"""
