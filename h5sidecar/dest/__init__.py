"""The DEST: where sidecars are written, and the record of what was indexed there.

One concept used by the workflows (which write it), the gateway and the catalog (which read it):
the run report's records, the local record (an SQLite database), the object-store record
(append-only Parquet parts and their local mirror), the lock, the walk over DEST's sidecars, and
the read-only views the gateway and the catalog serve from.
"""
