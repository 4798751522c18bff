"""The Merge op in the app: settings on the state, preview before running, results equal to
`inspector.merge`, re-runs from the compiled cache, copy as code (no browser)."""

import numpy as np
import pytest

import inspector


def models(k=2, seed=0):
    rng = np.random.default_rng(seed)
    base = {"w": rng.standard_normal((8, 4)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32)}
    tuned = [{n: v + 0.1 * rng.standard_normal(v.shape).astype(np.float32)
              for n, v in base.items()} for _ in range(k)]
    return base, tuned


@pytest.fixture
def merge_state():
    from inspector.ui.session.state import InspectorState

    s = InspectorState()
    base, tuned = models()
    s.add_tree("pre", base)
    for i, t in enumerate(tuned):
        s.add_tree(f"ft{i}", t)
    s.op = "merge"
    return s, s.ops["merge"], base, tuned


def test_preview_shows_formula_and_dtypes_then_the_run_equals_the_library(merge_state):
    s, m, base, tuned = merge_state
    m.param.update(method="ties", trees=["ft0", "ft1"])
    assert "needs base=" in s.form_error  # ties without a base: the core's own message
    m.base = "pre"
    assert s.form_error == ""
    assert s.preview.startswith("TIES (Yadav et al. 2023, TIES-Merging (arXiv:2306.01708)):\n")
    assert "int(density_i * size) largest" in s.preview
    assert "float32 → float32  (2 leaves)" in s.preview
    assert (m.normalize, m.rescale) == (True, False)  # mergekit's TIES defaults
    m.param.update(weights=[1.0, 0.5], density=[0.5, 0.25], lam=0.8)
    s.param.trigger("run")
    assert s.error == ""
    expected = inspector.merge("ties", tuned, base=base, weights=[1.0, 0.5],
                               density=[0.5, 0.25], lam=0.8)
    got = s.result.result.unpack()
    for k in expected:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(expected[k]))
    assert s.history[-1].op == "merge"


def test_changing_a_number_re_runs_without_compiling(merge_state):
    s, m, base, tuned = merge_state
    m.param.update(method="dare_ties", trees=["ft0", "ft1"], base="pre")
    assert (m.normalize, m.rescale) == (False, True)  # DARE's defaults
    s.param.trigger("run")
    runs = len(s.history)
    before = inspector.compile_count()
    m.density = [0.3, 0.6]
    m.seed = 4
    m.lam = 1.5
    assert len(s.history) == runs + 3  # each change re-ran
    assert inspector.compile_count() == before
    expected = inspector.merge("dare_ties", tuned, base=base, density=[0.3, 0.6], seed=4,
                               lam=1.5)
    got = s.result.result.unpack()
    np.testing.assert_array_equal(np.asarray(got["w"]), np.asarray(expected["w"]))


def test_slerp_takes_t_and_no_base_and_copies_as_code(merge_state):
    from inspector.ui.session.snippet import state_snippet

    s, m, base, tuned = merge_state
    m.param.update(method="slerp", trees=["ft0", "ft1"], t=0.25,
                   base="pre")
    assert s.form_error == ""  # the base field is ignored (hidden) for slerp
    s.param.trigger("run")
    expected = inspector.merge("slerp", tuned, t=0.25)
    np.testing.assert_allclose(np.asarray(s.result.result.unpack()["w"]),
                               np.asarray(expected["w"]), rtol=1e-6)
    code = state_snippet(s)
    assert "result = inspector.merge('slerp', [ft0, ft1], t=0.25)" in code.replace('"', "'")
    m.trees = ["ft0", "ft1", "pre"]
    assert s.form_error == "'slerp' merges exactly 2 trees; got 3 trees."


def test_merge_form_shows_the_fields_of_each_method(merge_state):
    from inspector.ui.forms.merge import MergeForm

    s, m, *_ = merge_state
    form = MergeForm(m, s)
    m.param.update(method="ties", trees=["ft0", "ft1"])
    assert (len(form.weights), len(form.densities)) == (2, 2)
    assert form.base.visible and form.lam.visible and not form.t.visible
    form.weights[1].value = 0.25
    assert m.weights == [1.0, 0.25]
    form.densities[0].value = 0.4
    assert m.density == [0.4, 1.0]
    m.method = "slerp"
    assert form.t.visible and not form.base.visible and not form.lam.visible
    assert (len(form.weights), len(form.densities)) == (0, 0)
    m.method = "model_stock"
    assert form.base.visible and not form.seed.visible
