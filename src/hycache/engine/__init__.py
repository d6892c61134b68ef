"""The reference engine: real hybrid models from transformers driven by the hycache cache.

Needs the ``[engine]`` extra (torch, transformers, safetensors). Importing this package does
not import torch; the modules that run models do.
"""
