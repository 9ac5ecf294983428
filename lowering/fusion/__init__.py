"""Fuse: Cuvil ops (and the torch ops around them) into fused Cuvil ops; each pass can be switched off."""
