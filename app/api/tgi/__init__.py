"""Text Generation Inference's API (`/generate`, `/generate_stream`, `POST /`): what Hugging Face
clients speak, a thin adapter over the one request plan."""
