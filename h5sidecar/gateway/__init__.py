"""h5sidecar.gateway."""
