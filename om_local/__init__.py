"""The offline model `om-local/extractive`: heuristics that stand in for the Observer and the Reflector.

It lets the demo, the tests and `om up` run with no provider key and no network. Its modules, one idea
each: `extractive` (the litellm custom provider: which prompt it got, what it answers), `observer` (a
transcript to dated, prioritised observations), `reflector` (an observation log condensed towards its
target), `salience` (how long a statement deserves to stay, shared by both), `extraction` (its answers to
extractor prompts), `wordllama` (the offline semantic embedder `om-local/wordllama-256`, the default) and
`embedding` (`om-local/hashing-embedding`, the feature-hashing fallback).

A package of its own beside the core's model access: it reads the prompts as text, and takes from the core
only the provider's name (`om_core.models.routing`) and the engine's token estimator (so "under the
target" is judged in the engine's units, with the one encoding a process loads). The core reaches it in
one place, `om_core.models.client`, which registers the provider with litellm when a configured model
names it. The import contracts in `pyproject.toml` hold both. The package re-exports nothing:
`extractive` imports litellm, the heuristics do not, so importing one of them stays cheap.
"""

import os

#: `extractive` imports litellm, which fetches its price table from the internet at import unless this is
#: "True". Every om process imports `om_core` first, which pins it; this package may be imported before
#: it (its tests import it directly), so it pins the same value itself.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
