"""Media in requests: images, video and audio fetched with limits, decoded, sampled and placed in the prompt."""
