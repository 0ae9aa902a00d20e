"""The hardware catalogue: instance types (GPUs, EFA, memory) and CUDA/driver/torch tables."""
