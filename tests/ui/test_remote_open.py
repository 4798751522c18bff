"""Opening checkpoint URLs in the app: refused unless the server allows it (--allow-remote,
PYTREE_INSPECTOR_ALLOW_REMOTE), optionally only some prefixes; the launcher takes URLs; read
progress shows as the status. Against a real range-serving HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

import inspector
from inspector import cli
from inspector.ui import app
from inspector.ui.session.checkpoint_files import REMOTE_OFF
from inspector.ui.session.state import InspectorState
from tests.io.servers import RangeServer
from tests.serving import launched_app, session

MODEL = {"dense": {"kernel": np.arange(12, dtype=np.float32).reshape(4, 3)},
         "big": np.ones(300_000, np.float32)}
OTHER = {"w": np.arange(5, dtype=np.int32)}


@pytest.fixture(scope="module")
def http(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    inspector.save(MODEL, folder / "model.safetensors")
    inspector.save(OTHER, folder / "other.safetensors")
    with RangeServer(folder) as server:
        yield server


def _state(prefixes) -> InspectorState:
    state = InspectorState()
    state.open.remote_prefixes = prefixes
    return state


def test_a_url_is_refused_unless_the_app_allows_it(http):
    state = _state(None)
    state.open.open_url_text = f"{http.url}/model.safetensors"
    http.traffic.reset()
    state.open.param.trigger("open_url")
    assert state.open.open_error == f"Cannot open {http.url}/model.safetensors: {REMOTE_OFF}"
    assert "--allow-remote" in state.open.open_error and not state.trees
    assert http.traffic.requests == []  # nothing was fetched


def test_an_allowed_url_opens_structure_only(http):
    state = _state([])
    state.open.open_url_text = f"{http.url}/model.safetensors"
    http.traffic.reset()
    state.open.param.trigger("open_url")
    assert state.open.open_error == "" and state.selected == "model.safetensors"
    loaded = state.trees["model.safetensors"]
    assert loaded.source == f"url {http.url}/model.safetensors"
    assert http.traffic.bytes <= 64 * 1024  # headers only


def test_only_the_allowed_prefixes_open(http):
    state = _state(["s3://models/"])
    state.open.open_url_text = f"{http.url}/model.safetensors"
    state.open.param.trigger("open_url")
    assert state.open.open_error == (f"Cannot open {http.url}/model.safetensors: this app opens "
                                     "only URLs starting with s3://models/.")
    state = _state([f"{http.url}/"])
    state.open.param.trigger("open_url")  # empty text: not a URL
    assert state.open.open_error.startswith("Cannot open '': it is not a URL.")
    state.open.open_url_text = f"{http.url}/model.safetensors"
    state.open.param.trigger("open_url")
    assert state.open.open_error == "" and "model.safetensors" in state.trees


def test_a_remote_read_shows_bytes_total_and_rate(http):
    state = _state([])
    shown = []
    state.param.watch(lambda e: shown.append(e.new), "status")
    state.open.open_url_text = f"{http.url}/model.safetensors"
    state.open.param.trigger("open_url")
    leaf = state.trees["model.safetensors"].tree["big"]
    np.testing.assert_array_equal(np.asarray(leaf), MODEL["big"])
    reading = [s for s in shown if s.startswith("Reading")]
    assert reading and re.fullmatch(
        rf"Reading {re.escape(http.url)}/model\.safetensors: 1\.14 MiB / 1\.14 MiB, .+/s",
        reading[-1]), reading


def test_the_environment_variable_sets_the_policy(monkeypatch):
    from inspector.ui.session.checkpoint_files import remote_prefixes_from_env

    monkeypatch.delenv("PYTREE_INSPECTOR_ALLOW_REMOTE", raising=False)
    assert remote_prefixes_from_env() is None
    monkeypatch.setenv("PYTREE_INSPECTOR_ALLOW_REMOTE", "1")
    assert remote_prefixes_from_env() == []
    page = app.create_app(defaults=False, background=False, root="")
    assert page.inspector.state.open.remote_prefixes == []
    monkeypatch.setenv("PYTREE_INSPECTOR_ALLOW_REMOTE", "https://a/,s3://b/")
    assert app.create_app(defaults=False, root="").inspector.state.open.remote_prefixes == [
        "https://a/", "s3://b/"]


def test_the_launcher_takes_urls_and_the_flags(http, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTREE_INSPECTOR_ALLOW_REMOTE", raising=False)
    trees = cli.load_all([f"{http.url}/model.safetensors"])
    assert list(trees) == ["model.safetensors"]
    calls = {}
    monkeypatch.setattr(app, "serve", lambda trees, **kw: calls.update(kw, trees=trees))
    assert cli.main([f"{http.url}/model.safetensors", "--no-show", "--root", str(tmp_path)]) == 0
    assert list(calls["trees"]) == ["model.safetensors"] and calls["remote_prefixes"] is None
    cli.main(["--no-show", "--root", str(tmp_path), "--allow-remote"])
    assert calls["remote_prefixes"] == []
    cli.main(["--no-show", "--root", str(tmp_path), "--allow-remote",
              "--remote-prefix", "s3://a/", "--remote-prefix", "hf://b/"])
    assert calls["remote_prefixes"] == ["s3://a/", "hf://b/"]


def test_open_url_waits_for_a_typed_url_and_enter_opens_what_the_field_shows(http):
    from panel.models.reactive_html import DOMEvent

    from inspector.ui.file_picker import FileOpener

    state = InspectorState(background=False)
    state.open.remote_prefixes = []
    opener = FileOpener(state)
    assert opener.open_url.disabled  # nothing typed
    opener.url.value_input = "  "
    assert opener.open_url.disabled
    opener.url.value_input = f"{http.url}/model.safetensors"
    assert not opener.open_url.disabled and state.open.open_url_text.endswith("/model.safetensors")
    state.busy = True
    assert opener.open_url.disabled
    state.busy = False
    # Enter arrives before the text typed last: the key press carries what the field shows
    shown = {"target": {"value": f"{http.url}/other.safetensors"}}
    opener.url._handle_enter(DOMEvent(model=None, node="enter", data=shown))
    assert state.open.open_error == "" and state.selected == "other.safetensors"
    assert state.trees["other.safetensors"].source == f"url {http.url}/other.safetensors"


# Browser ------------------------------------------------------------------------------------

def _launched(folder, *flags):
    env = {k: v for k, v in os.environ.items() if k != "PYTREE_INSPECTOR_ALLOW_REMOTE"}
    return launched_app(folder, "--no-examples", *flags, env=env)


@pytest.mark.browser
def test_the_served_app_opens_urls_only_with_allow_remote(browser, http, tmp_path):
    with _launched(tmp_path) as url, session(browser, url) as page:
        page.get_by_text("Opening URLs is off. Start the app with --allow-remote").wait_for(
            timeout=60_000)  # a busy machine
        assert page.get_by_label("Open URL").count() == 0
    with _launched(tmp_path, "--allow-remote") as url, session(browser, url) as page:
        field = page.get_by_label("Open URL")
        field.wait_for(timeout=60_000)
        button = page.locator("button", has_text="Open URL")
        assert button.is_disabled()  # nothing typed yet
        field.fill(f"{http.url}/model.safetensors")
        button.click()  # waits until the server holds the URL and enables the button
        _expect_row(page, http, field, "['dense']['kernel']", "float32[4,3]")
        assert page.get_by_text(f"url {http.url}/model.safetensors").count() >= 1
        # Enter opens what the field shows, even pressed at once after pasting
        field.fill(f"{http.url}/other.safetensors")
        field.press("Enter")
        _expect_row(page, http, field, "['w']", "int32[5]")
        assert page.get_by_text(f"url {http.url}/other.safetensors").count() >= 1


def _expect_row(page, http, field, path: str, text: str) -> None:
    item = page.locator(f"""[role=treeitem][data-path="{path}"]""").first
    try:
        item.wait_for(timeout=60_000)
    except PlaywrightTimeoutError:  # say what the page shows instead (an error, a status)
        said = [*page.get_by_role("status").all_inner_texts(),
                *page.get_by_role("alert").all_inner_texts()]
        pytest.fail(f"no row {path} a minute after opening the URL; the server saw "
                    f"{http.traffic.requests}; the field holds {field.input_value()!r}; "
                    f"the page says: {said}")
    assert text in item.inner_text()
