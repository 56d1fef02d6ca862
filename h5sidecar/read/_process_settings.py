"""Which process-wide read settings are in effect: the caches' sizes and the decode pool's.

Three fields of :class:`~h5sidecar.settings.ReadSettings` size resources shared by every reader
of a process (``sidecar_cache_bytes``, ``chunk_cache_bytes``, ``decode_threads``).  They come
from :func:`h5sidecar.read.configure` when it was called, else from the process's
``H5SIDECAR_*`` variables, read once when a reader first needs them (so Dask workers follow
their own environment).  Constructing a store never changes them.

The resources themselves (:data:`~h5sidecar.read._shared_caches.SIDECARS`,
:data:`~h5sidecar.read._shared_caches.CHUNKS`, :func:`~h5sidecar.read.native._decode.decode_executor`) ask
:func:`process_settings` for their size when they are used; this module imports none of them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from h5sidecar.settings import ENV_PREFIX, ReadSettings, from_env

__all__ = ["PROCESS_FIELDS", "check_process_settings", "process_settings", "set_process_settings"]

#: the fields of ReadSettings that size process-wide resources (ignored by each store)
PROCESS_FIELDS = ("sidecar_cache_bytes", "chunk_cache_bytes", "decode_threads")

_CURRENT: ReadSettings | None = None
_LOCK = threading.Lock()


def check_process_settings(settings: ReadSettings) -> None:
    """Refuse negative sizes (0 disables a cache, or means one decode thread per CPU).

    Raises
    ------
    ValueError
        Naming each bad field and its value.
    """
    wrong = [f"{name}={getattr(settings, name)!r}" for name in PROCESS_FIELDS
             if not getattr(settings, name) >= 0]
    if wrong:
        raise ValueError(
            f"invalid read settings: {', '.join(wrong)}; cache sizes and decode threads must be "
            ">= 0 (0 disables a cache; 0 decode threads means one per CPU). Check the "
            "H5SIDECAR_* environment variables."
        )


def _from_env(env: Mapping[str, str] | None = None) -> ReadSettings:
    # only the process-wide variables: a malformed per-store variable must not break a reader
    # that was given its settings explicitly
    env = os.environ if env is None else env
    names = {ENV_PREFIX + name.upper() for name in PROCESS_FIELDS}
    return from_env(ReadSettings, env={k: v for k, v in env.items() if k in names})


def process_settings() -> ReadSettings:
    """The process-wide settings in effect (read from the environment on the first call when
    :func:`set_process_settings` was not called before)."""
    global _CURRENT
    current = _CURRENT
    if current is None:
        with _LOCK:
            if _CURRENT is None:
                settings = _from_env()
                check_process_settings(settings)
                _CURRENT = settings
            current = _CURRENT
    return current


def set_process_settings(settings: ReadSettings | None) -> None:
    """Make ``settings`` the process-wide settings (``None``: read the environment again on
    next use).  Only :data:`PROCESS_FIELDS` of it matter."""
    global _CURRENT
    if settings is not None:
        check_process_settings(settings)
    with _LOCK:
        _CURRENT = settings
