"""h5sidecar.catalog."""
