"""A light Bokeh websocket client: one server session without a browser, for load tests.

A chromium page costs seconds of CPU to paint the app; twenty of them on a small machine
measure the browser, not the server. This client speaks Bokeh's protocol itself (the same
messages a page sends): it pulls the session's document as JSON, keeps every model's
attributes up to date from the server's patches, sends the `document_ready` event (which runs
the page's `onload` work, as a browser does once drawn) and sets model attributes, as a page
does when a widget changes. It decodes no model classes, so it works with the data models
Panel makes at run time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time

from bokeh.protocol import Protocol
from bokeh.protocol.receiver import Receiver
from bokeh.util.token import generate_jwt_token, generate_session_id
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

_IDS = itertools.count()


class BokehClient:
    """One session of `url` (`http://host:port/app`). `await connect()`, then read `models`
    (id -> attributes, as the page's document holds them) and `await set(...)`."""

    def __init__(self, url: str):
        self.url = url
        self.session_id = generate_session_id()
        self.models: dict[str, dict] = {}
        self.types: dict[str, str] = {}
        self._socket = None
        self._receiver = Receiver(Protocol())
        self._changed = asyncio.Event()
        self._reader = None
        self.closed_reason = ""

    async def connect(self, timeout: float = 60) -> None:
        ws = self.url.replace("http://", "ws://") + f"/ws?bokeh-session-id={self.session_id}"
        request = HTTPRequest(ws, request_timeout=timeout, connect_timeout=timeout)
        self._socket = await websocket_connect(
            request, subprotocols=["bokeh", generate_jwt_token(self.session_id)],
            max_message_size=64 * 2**20)
        ack = await self._next(timeout)
        assert ack.header["msgtype"] == "ACK", ack.header
        await self._send("PULL-DOC-REQ", {})
        reply = await self._next(timeout)
        assert reply.header["msgtype"] == "PULL-DOC-REPLY", reply.header
        self._walk(reply.content["doc"]["roots"])
        self._reader = asyncio.ensure_future(self._read())

    async def ready(self) -> None:
        """Sends `document_ready`, as a page does once it has drawn the document."""
        await self._patch([{"kind": "MessageSent", "msg_type": "bokeh_event", "msg_data": {
            "type": "event", "name": "document_ready", "values": {"type": "map"}}}])

    async def set(self, model_id: str, attr: str, value) -> None:
        """Sets a model attribute as a page does when a widget changes."""
        self.models[model_id][attr] = value
        await self._patch([{"kind": "ModelChanged", "model": {"id": model_id}, "attr": attr,
                            "new": value}])

    async def wait(self, predicate, timeout: float = 60):
        """Waits until `predicate(self)` is truthy (re-checked on every server patch);
        returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            found = predicate(self)
            if found:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or self._reader.done():
                why = f" ({self.closed_reason})" if self.closed_reason else ""
                raise TimeoutError(f"session {self.session_id[:8]}: not seen within "
                                   f"{timeout} s{why}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass

    def find(self, type_suffix: str, **attrs) -> list[str]:
        """Ids of the models whose type name ends with `type_suffix` and whose attributes (or
        their `data` model's attributes, for Panel's ESM components) match `attrs`."""
        out = []
        for model_id in self.models:
            if not self.types[model_id].endswith(type_suffix):
                continue
            if all(self.attr(model_id, k) == v for k, v in attrs.items()):
                out.append(model_id)
        return out

    def attr(self, model_id: str, name: str):
        """A model's attribute, or its data model's (Panel ESM components keep params there)."""
        values = self.models.get(model_id, {})
        if name in values:
            return values[name]
        data = values.get("data")
        if isinstance(data, dict) and "id" in data:
            return self.models.get(data["id"], {}).get(name)
        return None

    def texts(self) -> str:
        """Every string attribute of every model, joined: what the page could show."""
        out: list[str] = []

        def walk(value):
            if isinstance(value, str):
                out.append(value)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        for values in self.models.values():
            walk(values)
        return "\n".join(out)

    async def close(self, timeout: float = 10) -> None:
        """Closes the websocket and waits for the closing handshake, so its socket is closed
        before the event loop ends (else it leaks, and a later `gc` warns about it)."""
        if self._socket is not None:
            self._socket.close()
        if self._reader is not None:
            try:  # the reader returns once the server has answered the close
                await asyncio.wait_for(self._reader, timeout)
            except (TimeoutError, asyncio.CancelledError):
                pass
        if self._socket is not None and self._socket.protocol is not None:
            self._socket.protocol.stream.close()  # no answer in time: drop the connection

    # protocol -------------------------------------------------------------------------------

    async def _send(self, msgtype: str, content: dict) -> None:
        header = {"msgid": f"c{next(_IDS)}", "msgtype": msgtype}
        for part in (header, {}, content):
            await self._socket.write_message(json.dumps(part))

    async def _patch(self, events: list) -> None:
        await self._send("PATCH-DOC", {"events": events})

    async def _next(self, timeout: float):
        while True:
            fragment = await asyncio.wait_for(self._socket.read_message(), timeout)
            if fragment is None:
                raise ConnectionError(f"the server closed session {self.session_id[:8]}")
            message = await self._receiver.consume(fragment)
            if message is not None:
                return message

    async def _read(self) -> None:
        try:
            while True:
                fragment = await self._socket.read_message()
                if fragment is None:
                    self.closed_reason = "the server closed the connection"
                    return
                message = await self._receiver.consume(fragment)
                if message is None:
                    continue
                if message.header["msgtype"] == "PATCH-DOC":
                    self._apply(message.content["events"])
                self._changed.set()
        finally:
            self._changed.set()

    def _apply(self, events: list) -> None:
        for event in events:
            kind = event.get("kind")
            if kind == "ModelChanged":
                target = event["model"]["id"]
                self._walk(event["new"])
                self.models.setdefault(target, {})[event["attr"]] = _plain(event["new"])
            elif kind == "RootAdded":
                self._walk(event["model"])
            elif kind in ("ColumnDataChanged", "ColumnsStreamed", "ColumnsPatched"):
                continue

    def _walk(self, value) -> None:
        """Registers every object definition (`{type: object, id, attributes}`) in `value`."""
        if isinstance(value, dict):
            if value.get("type") == "object" and "id" in value:
                attributes = value.get("attributes", {})
                self.models.setdefault(value["id"], {}).update(
                    {k: _plain(v) for k, v in attributes.items()})
                self.types[value["id"]] = value.get("name", "")
            for v in value.values():
                self._walk(v)
        elif isinstance(value, list):
            for v in value:
                self._walk(v)


def _plain(value):
    """A serialized value as plain Python: maps as dicts, objects as `{"id": ...}` refs."""
    if isinstance(value, dict):
        if value.get("type") == "map":
            return {_plain(k): _plain(v) for k, v in value.get("entries", [])}
        if value.get("type") == "object" and "id" in value:
            return {"id": value["id"]}
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
