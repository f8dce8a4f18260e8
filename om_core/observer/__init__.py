"""The Observer: the model call that turns new messages into dated observations.

- `prompt`      its system prompt and user message, the previous observations it sees (truncated to a
                budget), and the parsing of what it writes back;
- `transcript`  messages rendered as the dated, timed transcript it reads, attachments as placeholders;
- `input`       its user message with the attachments it may see, as content parts.

The call itself (model, retries, a usable reply) is the engine's (`om_core.engine.observer_call`); the
log it writes to is `om_core.observations`. Import the modules directly; the package re-exports nothing.
"""
