"""What runs on the GPU instances: the interruption watcher (a systemd service the user data installs)."""
