"""The xarray engine ``"h5sidecar"`` and everything it opens: data stores, Datasets, DataTrees.

:mod:`.backend` is the entry point xarray finds; :mod:`._openers` holds ``open_dataset``,
``open_datatree`` and ``open_mfdataset``; the data stores, attributes, lazy arrays and the
Dataset / DataTree builders are the private modules beside them.  The public names are
exported by :mod:`h5sidecar.read`.
"""
