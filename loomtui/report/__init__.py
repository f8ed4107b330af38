"""What Loom tells about itself: status, doctor and the incident timeline."""
