"""gradeff: which optimizer and which memory strategy for your model on your hardware."""

__version__ = "0.1.0"
__all__ = ["__version__", "load"]


def __getattr__(name: str):
    # gradeff.load(paths) -> pandas.DataFrame; imported on first use, so `import gradeff` (every pytest session of
    # an environment with gradeff installed loads its plugin) does not import pandas.
    if name == "load":
        from gradeff.report.dataframe import load  # noqa: PLC0415 - jinja2, pandas: `import gradeff` stays light

        return load
    raise AttributeError(f"module 'gradeff' has no attribute {name!r}")
