"""The Panel app: one `InspectorState` per session and `Viewer` views that take it.

- `session/`       the Panel-free model (ruff bans panel and bokeh there):
                   `state.py` InspectorState (loaded trees, the ops' settings, previews,
                   result, history, error, busy; work in a worker thread when `background`);
                   `op_settings.py` + `ops/` one settings class per op (params, `job()`,
                   `preview()`, copy-as-code, eager reference), registered by name;
                   `records.py` CallRecord / Job / RunRecord; `loaded.py` LoadedTree;
                   `tree_index.py`, `diff_index.py` the rows the tree views draw;
                   `snippet.py` the run as code; `checkpoint_files.py`, `example_sets.py`.
- `forms/`         one form per op, bound to its settings (`@form("op")`).
- `operation_panel.py` tabs (one per registered op), preview, run controls, progress.
- `tree_view.py`   TreeView (lazy tree + leaf search table), `leaf_stats_view.py`
                   LeafStatsView (numbers from `session/leaf_numbers.py`).
- results          `result_view.py` (error, result tree, keep), `timing_card.py`,
                   `history_view.py`, `code_snippet.py` (copy as code).
- `sidebar.py`     loaded trees, examples, file picker, device; `app.py` the page, `serve`;
                   `notebook.py` `inspector.show` / `inspector.Inspector`.

Nothing is imported here, so `import inspector` stays free of UI libraries.
"""
