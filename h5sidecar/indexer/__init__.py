"""h5sidecar.indexer."""
