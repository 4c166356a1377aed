"""Units moetune's figures are kept in (any layer may import it, as words.py): bytes in GiB, as nvidia-smi, PyTorch's
memory reports and the GPU datasheets' HBM sizes count them."""

GIB = 1 << 30  # bytes in a GiB
