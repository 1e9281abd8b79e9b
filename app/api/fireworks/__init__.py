"""The Fireworks inference API (a superset of OpenAI's): `POST /v1/completions`,
`POST /v1/chat/completions` and `GET /v1/models`, also under `/inference/v1`, the Fireworks base
path. `requests` and `responses` mirror `fireworks-openapi.yaml`; `plan` decodes requests into the
request plan; `chat` and `completions` shape the answers; `routes` serves them."""
