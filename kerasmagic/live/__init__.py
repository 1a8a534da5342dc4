"""Live view: the versioned comm channel to the JupyterLab sidebar and its background sampler."""
