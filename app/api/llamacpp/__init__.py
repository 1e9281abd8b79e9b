"""llama.cpp's own server API (`/completion`, `/tokenize`, `/detokenize`, `/apply-template`,
`/props`): what llama-server's native clients speak, a thin adapter over the one request plan."""
