"""Disaggregated prefill/decode in the reference engine: a prefill instance (this process)
and a decode instance (a child process), each with its own cache, pool layout and page size,
joined by a real transport (gloo on loopback).

Modules: ``base`` (the contract: handshake metadata, what the decode side pulls, transfer
reports, the engine hooks), ``meta`` (an instance's handshake metadata), ``channel`` (the
gloo transport), ``payload`` (KV and state on the wire), ``arrival`` (landing pages with
zeroed tails, state overwrite), ``prefill`` / ``decode`` (the two sides' engine hooks),
``messages`` and ``worker`` (the decode process), ``pair`` (the driving side), ``verify``
(``hycache verify --disagg P:D``).
"""
