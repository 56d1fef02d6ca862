"""Worked examples built on the library, outside its core: ICESat-2 science in :mod:`.icesat2`
(its grid binning in :mod:`.grid_cells`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports

_LAZY = {
    "gridded_mean_height": "h5sidecar.examples.icesat2",
    "plot_grid": "h5sidecar.examples.icesat2",
}

__all__ = ["gridded_mean_height", "plot_grid"]


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.examples.icesat2 import gridded_mean_height as gridded_mean_height
    from h5sidecar.examples.icesat2 import plot_grid as plot_grid


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
