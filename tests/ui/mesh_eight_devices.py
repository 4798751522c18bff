"""Run in a subprocess with 8 fake CPU devices: the mesh panel driven through its state params.

Builds one session (`create_app`, work run synchronously), loads a tree, types a mesh and specs
(bad, then good), shards, runs a weighted sum of the sharded tree, and prints one JSON record
of what the state and views show, for `test_mesh_panel.py`.
"""

import json

import numpy as np

from inspector.ui.app import create_app
from inspector.ui.device_map import device_map_data
from inspector.ui.timing_card import timing_lines


def main() -> None:
    page = create_app(background=False, defaults=False, root="")
    app = page.inspector
    state, mesh = app.state, app.state.mesh
    record = {"presets": mesh.presets, "axes": mesh.axes}
    state.add_tree("model", {"w": np.arange(32.0, dtype=np.float32).reshape(8, 4),
                             "layers": [np.ones((6, 4), np.float32), np.ones(8, np.float32)],
                             "s": np.float32(2)}, select=True)
    record["fields"] = [f for f, _ in mesh.fields()]
    mesh.axes = "data=4, model=3"
    record["mesh_error"] = [mesh.mesh_error, app.mesh.shard_button.disabled]
    app.mesh.preset.value = "data=4, model=2"
    record["axes_after_preset"] = [mesh.axes, mesh.mesh_error, app.mesh.shard_button.disabled]
    app.mesh.fields["['w']"].value_input = "data, model"
    app.mesh.fields["['layers']"].value_input = "data"
    app.mesh.fields["['s']"].value_input = "model"
    record["spec_errors"] = dict(mesh.spec_errors)
    record["error_shown"] = {f: p.visible for f, p in app.mesh._errors.items()}
    app.mesh.fields["['layers']"].value_input = "model"
    app.mesh.fields["['s']"].value_input = ""
    record["spec_errors_fixed"] = dict(mesh.spec_errors)
    app.mesh.shard_button.clicks += 1
    record["after_shard"] = [state.selected, state.error, list(state.trees)]
    index = state.trees[state.selected].index
    record["labels"] = {r.path: index.label(("node", i))[0] for i, r in enumerate(index.rows)
                        if r.kind == "leaf"}
    record["device_map_input"] = device_map_data(state)
    state.ops["weighted_sum"].param.update(trees=[state.selected, state.selected],
                                           weights=[0.5, 0.25])
    state.op = "weighted_sum"
    state.param.trigger("run")
    record["run"] = [state.error, dict(timing_lines(state.result))]
    record["device_map"] = device_map_data(state)
    record["result_w"] = np.asarray(state.result.result["w"]).tolist()
    record["result_spec"] = str(state.result.result["w"].sharding.spec)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
