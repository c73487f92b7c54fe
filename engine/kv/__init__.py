"""KV cache: blocks, a sequence's cache and the shared slab, element types, the budget and forks."""
