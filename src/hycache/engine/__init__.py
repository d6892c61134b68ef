"""The reference engine: real hybrid models from transformers driven by the hycache cache.

Needs the ``[engine]`` extra (torch==2.13.0, transformers==5.24.0, safetensors). Importing
this package does not import torch; the modules that run models do.

Modules:

* ``archs``: tiny random checkpoints of each architecture (``hycache init-model``), with the
  locally trained tokenizer of ``tokenizer``;
* ``model``: loading through ``AutoModelForCausalLM.from_pretrained``, measuring what each
  layer caches, the spec the pool accounts with;
* ``store``: the tensors behind the pool's page and slot ids, with owner tags;
* ``engine``: admit -> restore (gather KV pages, clone the cached state) -> chunked prefill
  with checkpoints copied before the next chunk -> decode -> finish -> scatter; its
  parts: ``request`` (request and result types), ``transfer`` (KV gather/scatter and state
  copies against the store), ``checkpoints`` (and the injected faults), ``accounting``,
  ``scheduler`` (interleaving, one step at a time), ``sampling`` (greedy or seeded);
* ``spec_decode``: speculative decoding (``Engine(spec_decode=...)``): ``drafter`` (prompt
  lookup), ``draft_states`` (per-draft-step recurrent states from one verification forward,
  copy-back of the accepted step, KV rollback); see docs/spec_decode.md;
* ``online``: the engine on a long-running scheduler thread (what ``hycache serve`` runs);
* ``workloads``: short chat / branching / docqa streams (and scaled simulator workloads);
* ``verify``: cached vs cold runs (``hycache verify``); ``cli_engine``: the subcommands.

How each architecture maps onto the cache (transformers 5.24 builds a ``DynamicCache`` whose
per-layer classes say what a layer keeps):

============ ===================================== ==========================================
arch         cache layers                          hycache units
============ ===================================== ==========================================
qwen3_next   LinearAttentionLayer (Gated DeltaNet)  recurrent slot: conv window + GDN state
qwen3_5      + DynamicLayer (gated full attention)  full page: K, V [kv_heads, head_dim]
kimi_linear  LinearAttentionLayer (KDA) + MLA       full page: K = latent [1, kv_lora_rank],
             DynamicLayer                           V = rope key [1, rope_dim]
nemotron_h   LinearAttentionLayer (Mamba2) +        recurrent slot: conv window + SSM state;
bamba        DynamicLayer (attention)               full page: K, V
gemma3       DynamicSlidingWindowLayer + Dynamic-   swa page and full page: K, V (SWA pages
             Layer                                  keep every position; restore reads the
                                                    window before the hit)
falcon_h1    LinearAttentionAndFullAttentionLayer   both, from the same decoder layers
============ ===================================== ==========================================

Conv windows are stored as ``kernel - 1`` columns (transformers keeps ``kernel``; the oldest is
shifted out before it is read), so stored bytes equal what the spec accounts.
"""
