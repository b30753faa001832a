"""The paged KV cache with prefix caching (docs/semantics.md §6), one per instance."""
