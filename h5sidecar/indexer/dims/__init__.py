"""Dimension names as h5netcdf shows them (:mod:`._dim_names`), and which datasets are
dimension scales (:mod:`._scales`)."""
