"""Media in requests: images and video fetched with limits, decoded, sampled and placed in the prompt."""
