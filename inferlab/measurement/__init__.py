"""How a number is measured: the process a stage runs in, the machine it runs on, the one
timing harness (in one process and across worker processes), its statistics, the memory
measurement, the SDPA backends and the kernel that ran. May import ``core`` and
``algorithms``.
"""
