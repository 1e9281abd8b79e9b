"""Settings: the config file, the data and config folders, atomic writes, sizes."""
