"""What the applications share: files, records, progress, devices, batching, clusters and model specs."""
