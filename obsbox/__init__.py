"""obsbox: an observability stack in a box.

The shared core lives here: the CLI, config loading, the plugin registry and the record model.
The log bridge and the gateway exporters are in ``obsbox.exporters``, the collector config in
``obsbox.collector``, the dashboards in ``obsbox.dashboards``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
