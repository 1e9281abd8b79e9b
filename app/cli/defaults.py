"""What `fireside serve` does unless told otherwise (the other commands look for it at its address)."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_SHUTDOWN_GRACE = 10.0  # seconds; under Docker's 10 s and systemd's 90 s before they kill
