"""Dimension names as h5netcdf shows them (:mod:`._dim_names`), the sizes each name was given
in which groups (:mod:`._name_claims`), and which datasets are dimension scales
(:mod:`._scales`)."""
