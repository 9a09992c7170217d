"""The algorithms and kernels: naive and block-wise attention, the online softmax and its
exact merge, split-KV decoding, our Triton kernels, the analytic traffic model. Pure tensor
functions; may import ``core`` only.
"""
