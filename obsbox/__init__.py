"""obsbox: an observability stack in a box.

The shared core lives here: the CLI, config loading, the plugin registry and the record model.
The log bridge and the gateway exporters are in ``obsbox.exporters``, the collector config in
``obsbox.collector``, the dashboards in ``obsbox.dashboards``.
"""

__version__ = "0.1.0"  # the one place the version is written: pyproject.toml reads it from here

__all__ = ["__version__"]
