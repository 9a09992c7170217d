"""The evidence register and provenance: artifacts typed from their schemas, the hash-chained
register with its retained copies, the one provenance writer, what may be trusted, and the
history read back from it. Records what a stage computed, never what it computes. May import
the layers below it.
"""
