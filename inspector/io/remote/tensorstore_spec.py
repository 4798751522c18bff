"""The tensorstore kvstore spec of a remote folder, so orbax arrays are read where they live.

orbax keeps array metadata and data inside OCDBT (a b-tree of data files) that only tensorstore
reads; fsspec cannot. So for orbax checkpoints tensorstore fetches those ranges itself, through
its http / s3 / gcs drivers pointed at the same place (hf:// resolves to its https URL).
"""

from __future__ import annotations

import urllib.parse

from inspector.io.file_error import file_error


def kvstore_spec(location) -> dict:
    """Returns the tensorstore kvstore spec for a `RemoteFile` folder.

    Raises:
        LoadError: tensorstore has no driver for the URL's scheme, or the credentials given
            in storage_options cannot be handed to it.
    """
    url = location.url.split("?", 1)[0].rstrip("/") + "/"
    parts = urllib.parse.urlsplit(url)
    scheme, options = parts.scheme.lower(), location.options
    if scheme in ("http", "https"):
        headers = dict(options.get("headers") or {})
        headers.update((options.get("client_kwargs") or {}).get("headers") or {})
        spec = {"driver": "http", "base_url": f"{scheme}://{parts.netloc}", "path": parts.path}
        if headers:
            spec["headers"] = [f"{k}: {v}" for k, v in headers.items()]
        return spec
    if scheme in ("s3", "s3a"):
        if options.get("key") or options.get("secret") or options.get("token"):
            raise file_error(
                location.name,
                "orbax arrays are read by tensorstore, which cannot take key/secret from "
                "storage_options",
                "Set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an AWS profile) instead.",
            )
        endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
            "endpoint_url"
        )
        spec = {"driver": "s3", "bucket": parts.netloc, "path": parts.path.lstrip("/")}
        if endpoint:
            spec["endpoint"] = endpoint
        region = (options.get("client_kwargs") or {}).get("region_name")
        spec["aws_region"] = region or "us-east-1"
        spec["aws_credentials"] = {"type": "anonymous" if options.get("anon") else "default"}
        return spec
    if scheme in ("gs", "gcs"):
        return {"driver": "gcs", "bucket": parts.netloc, "path": parts.path.lstrip("/")}
    if scheme == "hf":
        fs = location.fs
        resolved = fs.resolve_path(location.fs_path)
        kind = "" if resolved.repo_type == "model" else f"{resolved.repo_type}s/"
        revision = urllib.parse.quote(resolved.revision or "main", safe="")
        base = fs.endpoint.rstrip("/")
        spec = {
            "driver": "http",
            "base_url": base,
            "path": f"/{kind}{resolved.repo_id}/resolve/{revision}/"
            f"{resolved.path_in_repo.strip('/')}/",
        }
        token = options.get("token")
        if isinstance(token, str):
            spec["headers"] = [f"Authorization: Bearer {token}"]
        return spec
    raise file_error(
        location.name,
        f"orbax arrays are read by tensorstore, which cannot read {scheme}:// URLs",
        "Use an http(s)://, s3://, gs:// or hf:// URL, or download the checkpoint folder.",
    )
