"""Measured time (``%%xla --profile``): a profiler session around the cell, XLA's events read from its
XSpace (``xplane``), joined to the cell's steps and kernels (``join``), broken down per kernel, aten op
and source line with a roofline reading (``breakdown``, ``peaks``), and exported for Perfetto and
XProf (``export``)."""
