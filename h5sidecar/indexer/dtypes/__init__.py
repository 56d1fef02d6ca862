"""HDF5 datatypes -> Zarr v2 dtypes and how each variable's values are carried
(:mod:`._dtype_plan`); compound types as structured dtypes (:mod:`._compound`)."""
