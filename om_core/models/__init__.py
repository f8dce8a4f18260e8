"""Model access for the Observer, the Reflector and structured extraction.

Submodules (import them directly; this package deliberately re-exports nothing so that importing
`om_core.models.selection` stays cheap and never loads litellm):

- `selection`: which model a call uses (`ModelByInputTokens`, fallback chains, the default model);
- `routing`: router IDs (`google/gemini-2.5-flash`) to litellm names, provider-option translation;
- `retry`: the single transport-retry layer (§5.9);
- `client`: `ModelClient.complete`, litellm behind one call with retries, fallbacks, usage and cost;
- `local.extractive`: the offline, deterministic `om-local/extractive` model registered with litellm
  (heuristics in `local.observer` and `local.reflector`).

Before any submodule imports litellm, litellm is told to use the price table it ships with: otherwise
every process start tries to download it (three attempts with back-off when there is no network), and
prices would change under a running deployment. A deployment that wants the live table sets
`LITELLM_LOCAL_MODEL_COST_MAP=False` explicitly.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
