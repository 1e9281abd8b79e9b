"""The API dialects Fireside speaks, one package or module each: its wire Structs, a decoder of
its bodies into the request plan (`app.pipeline.plan`), a shaper of the engine's events into its answers,
and its routes. A new front door is one more of these."""
