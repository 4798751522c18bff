"""The Panel app: one `InspectorState` per session and `Viewer` views that take it.

- `state.py`       InspectorState: loaded trees, op settings, previews, result, history, error,
                   busy; runs work in a worker thread when `background` (the served app).
- `operations.py`  op settings -> `Job`s (calls of the public API) and cheap previews.
- `tree_index.py`  a tree's `describe` rows indexed for a lazy `pmui.Tree` (ranges, reveal).
- `tree_view.py`   TreeView (lazy tree + leaf search table), `leaf_stats.py` LeafStatsView.
- forms            `weighted_sum_form.py`, `index_form.py`, `stack_form.py` (stack, unstack),
                   `operation_panel.py` (tabs, preview, run controls, progress).
- results          `result_view.py` (error, result tree, keep), `timing_card.py`,
                   `history_view.py`; `eager.py` the un-jitted reference timed on request.
- `sidebar.py`     loaded trees, examples, file picker, device; `app.py` the page, `serve`;
                   `notebook.py` `inspector.show` / `inspector.Inspector`.

Nothing is imported here, so `import inspector` stays free of UI libraries.
"""
