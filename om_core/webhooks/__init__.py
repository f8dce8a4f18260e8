"""Webhooks: a tenant's HTTP endpoints receive its threads' events from the outbox, signed, in order.

- `policy.py`   the delivery knobs (backoff, bound, timeouts, the operator's private-range switch)
- `targets.py`  which URLs may be called: http(s) only, every address the host resolves to globally
                reachable (after unwrapping the IPv4 address an IPv6 one can carry: IPv4-mapped, NAT64,
                6to4, Teredo, ISATAP, ...); the one address a delivery run connects to (resolved once)
- `signing.py`  Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC>`
                (one per valid secret during a rotation); the deprecated `OM-Signature` for legacy endpoints
- `store.py`    endpoints, their cursor and state, their last attempts
- `delivery.py` one endpoint's run: the events past its cursor, one at a time, the cursor moved after a 2xx;
                each request to the checked address with the URL's host as `Host`, TLS SNI and name

Delivery runs only in `DeliverWebhooks` tasks (queue `om.webhook`), one endpoint per task under the
endpoint's lock, kicked by the maintenance pass: nothing on the turn path reads or calls an endpoint.
"""
