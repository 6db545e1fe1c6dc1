"""The attnc package's version: the same string as libattnc's attnc_version()."""
__version__ = "0.1.0"
