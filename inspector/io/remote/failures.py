"""What went wrong with a URL, in words: the kind of failure, and the URL without secrets."""

from __future__ import annotations

import asyncio
import re
import urllib.parse

NOT_FOUND = "it was not found on the server"


def redact(url: str) -> str:
    """Returns `url` without credentials: no user:password, no query string (tokens live there).

    >>> redact("https://me:pw@host:8000/m.safetensors?X-Amz-Signature=abc")
    'https://***@host:8000/m.safetensors?...'
    """
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + (
        "?..." if parts.query else ""
    )


def classify(exc: BaseException, timeout: float) -> tuple[str, str]:
    """Returns (the problem, the fix) for a filesystem error, looking through its causes."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    names = {type(e).__name__ for e in chain}
    status = next((getattr(e, "status", None) for e in chain if getattr(e, "status", None)), None)
    codes = {str(getattr(e, "response", {}).get("Error", {}).get("Code", "")) for e in chain
             if isinstance(getattr(e, "response", None), dict)}
    text = " ".join(str(e) for e in chain)
    if status in (401, 403) or isinstance(exc, PermissionError) or codes & _AUTH_CODES or (
        "403" in text and "Forbidden" in text
    ):
        return (f"access was denied (HTTP {status or 403}): the credentials are missing or wrong",
                "Pass credentials in storage_options (e.g. key/secret, token, headers) or set "
                "the provider's environment variables.")
    if any(isinstance(e, TimeoutError | asyncio.TimeoutError) for e in chain) or names & {
        "FSTimeoutError", "ServerTimeoutError", "ReadTimeoutError", "ConnectTimeoutError",
        "SocketTimeoutError", "ConnectionTimeoutError",
    }:
        return (f"the server did not answer within {timeout:g} s",
                "Check that the server is up, or allow longer: inspector.load(url, timeout=...).")
    if names & {"ClientPayloadError", "ContentLengthError", "IncompleteRead",
                "ResponseStreamingError", "TransferEncodingError"}:
        return ("the response was truncated (the connection closed before all bytes came)",
                "Try again; if it persists the server or the file is broken.")
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or names & {
        "ClientConnectorError", "EndpointConnectionError", "ClientOSError",
        "ServerDisconnectedError", "ConnectError", "ConnectionError",
    }:
        return ("could not connect to the server (refused or unreachable)",
                "Check the host and port, and that the server is running.")
    if any(isinstance(e, FileNotFoundError) for e in chain) or status == 404 or codes & {
        "NoSuchKey", "NoSuchBucket", "404"
    }:
        return (NOT_FOUND,
                "Check the URL; for a private file, pass credentials in storage_options.")
    if status:
        return (f"the server answered HTTP {status}", "Check the URL and the server.")
    return ("reading it failed", "Check the URL, the storage_options and the network.")


_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403",
               "InvalidToken", "ExpiredToken", "Unauthorized"}


_SECRET_KEYS = ("key", "secret", "token", "password", "access_key", "secret_key",
                "aws_access_key_id", "aws_secret_access_key", "aws_session_token")


def clean(text: str, url: str, options: dict) -> str:
    """`text` with the URL's credentials and any secret from `options` masked."""
    text = " ".join(text.replace(url, redact(url)).split())
    text = re.sub(r"//[^/@\s]+:[^/@\s]*@", "//***@", text)
    secrets = [str(options.get(k)) for k in _SECRET_KEYS if options.get(k)]
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text[:500]
