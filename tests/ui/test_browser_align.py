"""End-to-end: a torch-layout and a Flax-layout checkpoint, aligned, fixed, converted (S9)."""

from __future__ import annotations

import pytest

from tests.core.port_models import write_ambiguous_cnn
from tests.serving import launched_app, open_compare_tab, session

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """`python -m inspector cnn.pt cnn_flax.safetensors`: the same CNN in torch's layout (a
    state dict file written without torch) and in Flax's; the Flax head's kernel could come
    from either of two torch heads (one ambiguous row)."""
    folder = tmp_path_factory.mktemp("port")
    write_ambiguous_cnn(folder)
    with launched_app(folder, "cnn.pt", "cnn_flax.safetensors") as url:
        yield url


def test_align_override_convert_then_no_difference(browser, launched):
    with session(browser, launched) as page:
        page.get_by_role("treeitem").first.wait_for()
        open_compare_tab(page)
        page.get_by_role("button", name="Align cnn.pt onto cnn_flax.safetensors").click()
        rows = page.locator(".align-view .tabulator-row")
        rows.first.wait_for()
        assert "ambiguous" in rows.first.inner_text()
        assert "['params']['head']['kernel']" in rows.first.inner_text()
        page.get_by_text("20 of 21 target leaves paired · 0 unmatched · 1 ambiguous").wait_for()
        rows.first.click()
        picker = page.get_by_role("combobox", name="Source leaf (type to search the unused "
                                                   "ones)")
        picker.click()
        picker.fill("encoder")
        page.get_by_role("option", name="['encoder']['head']['weight']").click()
        page.get_by_role("button", name="Use this source").click()
        page.get_by_text("21 of 21 target leaves paired").wait_for()
        page.get_by_role("button", name="Convert").click()
        summary = page.locator(".diff-summary")
        summary.get_by_text("No differences").wait_for(timeout=60_000)
        assert "cnn.pt ported" in summary.inner_text()
        # The values of all 21 leaves compared: the most changed first, and it is 0
        first = page.locator(".tabulator-cell[tabulator-field=max_abs]").first
        first.wait_for(timeout=60_000)
        assert float(first.inner_text()) == 0.0
