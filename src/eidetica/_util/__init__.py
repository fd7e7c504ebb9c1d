"""The floor every layer may import: NumPy's BLAS thread control (``blas``), durable file writes (``fs``) and the metrics port (``observe``)."""
