"""Where `fireside serve` listens unless told otherwise; the other commands look for it there."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
