"""Model access for the Observer, the Reflector and structured extraction.

Submodules (import them directly; this package deliberately re-exports nothing so that importing
`om_core.models.selection` stays cheap and never loads litellm):

- `selection`: which model a call uses (`ModelByInputTokens`, fallback chains, the default model);
- `routing`: router IDs (`google/gemini-2.5-flash`) to litellm names, provider-option translation;
- `retry`: the single transport-retry layer (§5.9);
- `client`: `ModelClient.complete`, litellm behind one call with retries, fallbacks, usage and cost;
- the offline, deterministic `om-local/extractive` model is a package of its own, `om_local`, which
  `client` registers with litellm when a configured model names it.

litellm's price table is pinned to the local copy by `om_core` itself (its `__init__`), before any of
these submodules can import litellm.
"""
