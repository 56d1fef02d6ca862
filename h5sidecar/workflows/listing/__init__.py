"""What a batch indexes: granules listed from a folder, a glob, an S3 prefix or a URL list, staged on disk."""
