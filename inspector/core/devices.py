"""Devices: the ones JAX can run on here, their short names, and a name turned back into one."""

from __future__ import annotations

import jax

from inspector.core.errors import InspectorError


def device_name(device) -> str:
    """A device's short name as JAX prints it (`cpu:0`, `cuda:1`)."""
    name = str(device)
    return name if ":" in name else f"{device.platform}:{device.id}"


def devices() -> list[jax.Device]:
    """Returns the devices JAX can run on here (`jax.devices()`), the default first."""
    return list(jax.devices())


def resolve_device(device=None) -> jax.Device:
    """Returns the `jax.Device` meant by `device`: a Device, a name like `"cpu:1"`, or None.

    Raises:
        InspectorError: no device has that name; the message lists the ones there are.
    """
    if device is None:
        return jax.devices()[0]
    if isinstance(device, jax.Device):
        return device
    names = {f"{d.platform}:{d.id}": d for d in jax.devices()}  # also `gpu:0` for `cuda:0`
    names.update({device_name(d): d for d in jax.devices()})
    if isinstance(device, str) and device in names:
        return names[device]
    raise InspectorError(
        f"No device named {device!r}. Devices here: {', '.join(map(device_name, jax.devices()))}."
    )
