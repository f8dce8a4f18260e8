"""When OM observes, buffers, activates and reflects: pure decisions, no storage, clock or network.

- `decisions`         every threshold, interval and boundary decision, and the status a turn reports;
- `early_activation`  activating buffered work before its threshold when the actor's prompt cache is cold
                      (idle past the provider's cache TTL) or about to be invalidated.

Import the modules directly; the package re-exports nothing.
"""
