"""The floor every layer may import: NumPy's BLAS thread control (``blas``) and the metrics port (``observe``)."""
