"""Ollama's API (`/api/chat`, `/api/generate`, `/api/embed`, model management): wire Structs, plan
builders and shapers of this dialect."""
