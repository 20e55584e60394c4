"""The bottom layer: what every other layer may import.

``registry`` (name -> variant), ``configlib`` (the config validation toolkit), ``envflags``
(environment switches), ``sharding`` (logical axis names), ``compiler`` (the XLA options our
jitted programs compile with), ``tokens`` (the special token ids), ``paths`` (user paths as
``etils.epath`` paths: local ones absolute, ``gs://`` URLs as given). Nothing here imports another
layer of the package.
"""
