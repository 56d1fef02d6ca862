"""A collection's items as stac-geoparquet: the table (:mod:`._stac_geoparquet`) and the folder of
parts updated in what changed (:mod:`._parts`)."""
