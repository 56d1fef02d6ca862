"""Other libraries' private APIs, one module per library, each use named, documented and gated.

Every use of a third-party name that its library does not promise to keep (an underscored
attribute, ``zarr.core.*``, ctypes into libhdf5, ...) lives here and nowhere else:
:mod:`~h5sidecar._compat.xarray`, :mod:`~h5sidecar._compat.zarr`,
:mod:`~h5sidecar._compat.h5py` (with the ctypes access to the HDF5 library),
:mod:`~h5sidecar._compat.h5netcdf`,
:mod:`~h5sidecar._compat.s3fs`, :mod:`~h5sidecar._compat.stdlib`, and
:mod:`~h5sidecar._compat.fsspec` (the package's one async-to-sync bridge).  Each module checks
its library's version against the range the uses were verified on; outside it, a use takes the
public code path where one exists, else fails with an error naming the library and version.
``tests/test_compat.py`` checks each use on the installed versions; ``make test-upstream`` runs
it against the newest releases.

This ``__init__`` imports nothing: importing one module must not load another library
(``references/`` must not load h5py).
"""
