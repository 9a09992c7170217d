"""The pipeline's stages, one module each (declared in ``inferlab.pipeline.STAGES``):

* ``probe``       -> probe.json       environment, SDPA availability, measured ceilings
* ``correctness`` -> correctness.csv  error against float64; block pairs; split-KV; merge
* ``prefill``     -> prefill.csv      naive / tiled / tiled_fast / SDPA per backend: time, memory
* ``decode``      -> decode.csv       one query against a cache: split-KV vs fused SDPA
* ``traffic``     -> traffic.csv      the traffic model's ratio against the measured one
* ``claims``      -> claims.json      each chapter claim's verdict on this machine

Each module holds ``Params`` (built from the stage's effective config) and
``run(params, ctx)``; ``inferlab.stages.common`` holds what they share.
"""
