"""The local mode (``obsbox up``): the stack in a box as local processes, for machines without a
Docker engine; its live summary, and the OTLP/Loki receiver it embeds."""
