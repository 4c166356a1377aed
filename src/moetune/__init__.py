"""moetune: plan, check and diagnose Mixture-of-Experts training on Megatron-Core."""

__version__ = "0.1.0"
