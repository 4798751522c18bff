"""Memory on this machine: how much is free (host RAM, device memory) and giving it back."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import jax


def host_available() -> int:
    """Returns the bytes of host RAM the kernel could hand out now (`MemAvailable`).

    Falls back to total physical memory where /proc is missing.
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_available(device: jax.Device) -> int:
    """Returns the free bytes of `device`'s memory (host RAM for CPU devices)."""
    if device.platform == "cpu":
        return host_available()
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    if limit is None:
        return host_available()
    return int(limit) - int(stats.get("bytes_in_use", 0))


def resident_bytes() -> int:
    """Returns this process's resident set size in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


_LIBC = None


def give_back() -> bool:
    """Returns freed heap memory to the OS (glibc `malloc_trim(0)`); False where unavailable.

    Large arrays are mapped and unmapped on their own; the many small blocks a released tree
    leaves behind stay in the process until trimmed, so a long-lived server grows without it.
    """
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name) if name else False
        except OSError:
            _LIBC = False
    trim = getattr(_LIBC, "malloc_trim", None) if _LIBC else None
    if trim is None:
        return False
    trim(0)
    return True
