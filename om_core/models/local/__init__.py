"""The offline model `om-local/extractive`: heuristics that stand in for the Observer and the Reflector.

It lets the demo, the tests and `om up` run with no provider key and no network. Its modules, one idea
each: `extractive` (the litellm custom provider: which prompt it got, what it answers), `observer` (a
transcript to dated, prioritised observations), `reflector` (an observation log condensed towards its
target) and `salience` (how long a statement deserves to stay, shared by both).

This package re-exports nothing, like `om_core.models`: `extractive` imports litellm, the heuristics do
not, so importing one of them stays cheap.
"""
