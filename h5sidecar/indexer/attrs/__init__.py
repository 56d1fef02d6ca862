"""Attributes of HDF5 objects -> JSON-ready Zarr attributes, read from the metadata bytes.

:mod:`._zarr_attrs` converts an object's attributes (what is kept, what netCDF readers show);
:mod:`._native` reads them without h5py from the bytes the crawl already holds, through
:mod:`._messages` (where the attribute messages are, over :mod:`._object_header`'s walk of a
header's chunks) and :mod:`._message_decode` (what each holds); :mod:`._netcdf_types` keeps the
type a netCDF reader shows for each value.
"""
