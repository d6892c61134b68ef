"""Tiers under the reference engine's device cache: host memory, disk and a Redis store.

The device tier is the engine's ``HybridPrefixCache`` with its ``TensorStore``. Below it a
``TierChain`` holds immutable objects (one KV page of one attention kind, or one recurrent
state) keyed by content: the component, the page size and the page-hash chain of the tokens
(a state is keyed by the last page hash of its prefix). Every object the engine writes into
the device store is also written through to every tier (``TierChain.put``); each tier evicts
by its own budget (host and disk: LRU by bytes; Redis: TTL and ``maxmemory-policy``). On
admission the engine asks ``plan_extension`` how far the tiers extend the device's hit and
loads that from the fastest tier holding each object; anything missing, corrupt, foreign or
late is a miss and the tokens are recomputed.

Modules: ``base`` (the contract: objects, keys, counters, ``TierBackend``), ``codec`` (the
blob format of disk and Redis: header, fingerprint, checksum), ``host``, ``disk``, ``redis``
(the backends), ``chain`` (write-through and the cascade of reads), ``extend`` (the longest
loadable prefix beyond a device hit), ``config`` (``host=SIZE,disk=SIZE,redis=URL``),
``fingerprint`` (the model/layout identity every object carries).
"""
