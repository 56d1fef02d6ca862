"""Worked examples built on the library, outside its core: ICESat-2 science in :mod:`.icesat2`
(its grid binning in :mod:`.grid_cells`)."""
