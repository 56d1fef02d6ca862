"""Virtual datasets: their mappings resolved as HDF5 resolves them (:mod:`._mapping`) and the
source chunks laid on one chunk grid (:mod:`._table`)."""
